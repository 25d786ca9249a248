-- Fast takeover of a dead worker's runs (issue 19 item 3, ADR 0018). A worker loop holds a
-- session-level advisory lock, (1415008843, its key), on a connection it keeps open for
-- its life; Postgres releases it the moment the process dies (or the connection drops).
-- The claim probes the registered workers' locks and re-leases the running runs of those
-- whose lock nobody holds at once, instead of waiting out their leases. A worker that is
-- merely frozen still holds its lock: only its lease's expiry moves its runs, and the epoch
-- fences whatever it writes after that (unchanged). 1415008843 is b'TWRK': the class of
-- the two-int advisory keys, apart from every one-bigint key (the migrations' lock).

CREATE TABLE worker_sessions (
    worker_id   text PRIMARY KEY,  -- the runs' lease_owner
    lock_key    integer NOT NULL UNIQUE,  -- held as pg_advisory_lock(1415008843, lock_key)
    started_at  timestamptz NOT NULL DEFAULT now(),
    locked_at   timestamptz NOT NULL DEFAULT now()  -- last (re)registration
);
REVOKE ALL ON worker_sessions FROM PUBLIC;

-- A dead owner's running runs, found without reading every running run.
CREATE INDEX runs_running_by_owner ON runs (lease_owner) WHERE status = 'running';

-- Called on the worker's own long-lived connection: takes the session lock, then records
-- the worker under that key. Never waits: 'key_taken' (a live session holds the key, or a
-- registered worker, dead or reconnecting, owns it) and 'id_taken' (the id is another
-- worker's) tell the caller to try another key or id; the lock is not kept then. A worker
-- whose lock connection dropped comes back with p_rejoin: its row is kept or re-made,
-- under the new key if its old one was taken meanwhile.
CREATE FUNCTION tenantry_register_worker(p_worker text, p_key integer, p_rejoin boolean)
RETURNS text
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, public AS $$
DECLARE
    v_constraint text;
BEGIN
    IF NOT pg_try_advisory_lock(1415008843, p_key) THEN
        RETURN 'key_taken';
    END IF;
    BEGIN
        IF p_rejoin THEN
            INSERT INTO public.worker_sessions (worker_id, lock_key) VALUES (p_worker, p_key)
            ON CONFLICT (worker_id) DO UPDATE
                SET lock_key = EXCLUDED.lock_key, locked_at = now();
        ELSE
            INSERT INTO public.worker_sessions (worker_id, lock_key) VALUES (p_worker, p_key);
        END IF;
    EXCEPTION WHEN unique_violation THEN
        -- A session lock is not undone by the rollback of this block: let it go by hand.
        GET STACKED DIAGNOSTICS v_constraint = CONSTRAINT_NAME;
        PERFORM pg_advisory_unlock(1415008843, p_key);
        RETURN CASE WHEN v_constraint = 'worker_sessions_pkey' THEN 'id_taken'
                    ELSE 'key_taken' END;
    END;
    RETURN 'registered';
END
$$;
REVOKE ALL ON FUNCTION tenantry_register_worker(text, integer, boolean) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION tenantry_register_worker(text, integer, boolean) TO tenantry_app;

-- Registered workers whose session lock nobody holds: their processes (or their lock
-- connections) are gone. One probe per registered worker, never one per run. A probe that
-- succeeds holds the lock shared until the caller's transaction ends, so the key cannot be
-- taken by a new registration meanwhile (it picks another; it never waits). Called by the
-- claims below (runs and activity tasks) before anything else.
CREATE FUNCTION tenantry_dead_workers() RETURNS text[]
LANGUAGE sql VOLATILE SET search_path = pg_catalog, public AS $$
    SELECT coalesce(array_agg(s.worker_id), '{}') FROM public.worker_sessions s
    WHERE pg_try_advisory_xact_lock_shared(1415008843, s.lock_key)
$$;
REVOKE ALL ON FUNCTION tenantry_dead_workers() FROM PUBLIC;

-- A dead worker with no running run left is forgotten. Rows another claimer is deleting
-- are skipped (never waited for); one whose key a live session holds again (its worker
-- reconnected) is kept.
CREATE FUNCTION tenantry_forget_dead_workers(p_dead text[]) RETURNS void
LANGUAGE sql VOLATILE SET search_path = pg_catalog, public AS $$
    DELETE FROM public.worker_sessions s
    WHERE s.worker_id IN (
        SELECT d.worker_id FROM public.worker_sessions d
        WHERE d.worker_id = ANY (p_dead)
          AND pg_try_advisory_xact_lock_shared(1415008843, d.lock_key)
          AND NOT EXISTS (SELECT 1 FROM public.runs r
                          WHERE r.lease_owner = d.worker_id AND r.status = 'running')
        ORDER BY d.worker_id
        FOR UPDATE SKIP LOCKED)
$$;
REVOKE ALL ON FUNCTION tenantry_forget_dead_workers(text[]) FROM PUBLIC;

-- The fair claim of 0013, first re-leasing the runs of dead registered workers (as many as
-- the batch takes), then expired leases, then queued runs as before. Three more columns
-- say what a re-leased run was taken from (for the claimer's log); NULL for queued runs.
DROP FUNCTION tenantry_claim_runs(text, integer, double precision, text, boolean);
CREATE FUNCTION tenantry_claim_runs(p_worker text, p_batch integer,
                                    p_lease_seconds double precision,
                                    p_kind text DEFAULT 'agent',
                                    p_in_flight_first boolean DEFAULT false)
RETURNS TABLE (tenant_id text, run_id uuid, lease_epoch bigint, taken_from text,
               lease_was_until timestamptz, owner_gone boolean)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, public AS $$
DECLARE
    v_claimed integer;
    v_tenant text;
    v_run uuid;
    v_skip text[] := '{}';
    v_holding boolean := false;
    v_in_flight boolean := coalesce(p_in_flight_first, false);  -- the tier being served
    v_dead text[];
    v_count integer;
BEGIN
    v_dead := public.tenantry_dead_workers();  -- held shared until this claim commits

    v_claimed := 0;
    IF cardinality(v_dead) > 0 THEN
        -- Their runs now, whatever their leases say: they are voided like expired ones
        -- (epoch + 1), so a write the dead owner left in flight is refused.
        RETURN QUERY
        WITH orphaned AS (
            SELECT r.tenant_id, r.run_id, r.lease_owner, r.lease_expires_at FROM public.runs r
            WHERE r.status = 'running' AND r.lease_owner = ANY (v_dead) AND r.kind = p_kind
            ORDER BY r.lease_expires_at
            LIMIT p_batch
            FOR UPDATE SKIP LOCKED
        )
        UPDATE public.runs r
        SET lease_owner = p_worker, lease_epoch = r.lease_epoch + 1,
            lease_expires_at = now() + make_interval(secs => p_lease_seconds),
            updated_at = now()
        FROM orphaned
        WHERE r.tenant_id = orphaned.tenant_id AND r.run_id = orphaned.run_id
        RETURNING r.tenant_id, r.run_id, r.lease_epoch, orphaned.lease_owner,
                  orphaned.lease_expires_at, true;
        GET DIAGNOSTICS v_claimed = ROW_COUNT;
        PERFORM public.tenantry_forget_dead_workers(v_dead);
    END IF;

    IF v_claimed < p_batch THEN
        RETURN QUERY
        WITH expired AS (
            SELECT r.tenant_id, r.run_id, r.lease_owner, r.lease_expires_at FROM public.runs r
            WHERE r.status = 'running' AND r.lease_expires_at < now() AND r.kind = p_kind
            ORDER BY r.lease_expires_at
            LIMIT p_batch - v_claimed
            FOR UPDATE SKIP LOCKED
        )
        UPDATE public.runs r
        SET lease_owner = p_worker, lease_epoch = r.lease_epoch + 1,
            lease_expires_at = now() + make_interval(secs => p_lease_seconds),
            updated_at = now()
        FROM expired
        WHERE r.tenant_id = expired.tenant_id AND r.run_id = expired.run_id
        RETURNING r.tenant_id, r.run_id, r.lease_epoch, expired.lease_owner,
                  expired.lease_expires_at, false;
        GET DIAGNOSTICS v_count = ROW_COUNT;
        v_claimed := v_claimed + v_count;
    END IF;

    WHILE v_claimed < p_batch LOOP
        IF v_holding THEN
            -- Holding a tenant row already: never wait for another (two claimers waiting
            -- for each other's rows would deadlock); one being claimed for is skipped.
            SELECT l.tenant_id INTO v_tenant
            FROM public.tenant_load l
            JOIN public.tenant_policies p ON p.tenant_id = l.tenant_id
            JOIN public.tenant_budget b ON b.tenant_id = l.tenant_id
            WHERE public.tenantry_may_claim(l, p, b) AND l.tenant_id <> ALL (v_skip)
              AND (NOT v_in_flight OR EXISTS (
                  SELECT 1 FROM public.runs r
                  WHERE r.tenant_id = l.tenant_id AND r.kind = p_kind
                    AND r.status = 'queued' AND r.steps > 0
                    AND (r.available_at IS NULL OR r.available_at <= now())))
            ORDER BY l.running::float8 / p.weight, l.last_claim_at NULLS FIRST, l.tenant_id
            LIMIT 1
            FOR UPDATE OF l SKIP LOCKED;
        ELSE
            -- Holding none: wait for the best tenant's row if another claimer has it (a
            -- few ms), rather than come back empty while it has work. The row is checked
            -- again once locked.
            SELECT l.tenant_id INTO v_tenant
            FROM public.tenant_load l
            JOIN public.tenant_policies p ON p.tenant_id = l.tenant_id
            JOIN public.tenant_budget b ON b.tenant_id = l.tenant_id
            WHERE public.tenantry_may_claim(l, p, b) AND l.tenant_id <> ALL (v_skip)
              AND (NOT v_in_flight OR EXISTS (
                  SELECT 1 FROM public.runs r
                  WHERE r.tenant_id = l.tenant_id AND r.kind = p_kind
                    AND r.status = 'queued' AND r.steps > 0
                    AND (r.available_at IS NULL OR r.available_at <= now())))
            ORDER BY l.running::float8 / p.weight, l.last_claim_at NULLS FIRST, l.tenant_id
            LIMIT 1
            FOR UPDATE OF l;
        END IF;
        IF v_tenant IS NULL THEN
            EXIT WHEN NOT v_in_flight;
            -- No tenant has in-flight work left to claim: new runs now, in the fair order.
            -- Tenants skipped in that tier may still have new runs.
            v_in_flight := false;
            v_skip := '{}';
            CONTINUE;
        END IF;
        v_holding := true;

        SELECT r.run_id INTO v_run FROM public.runs r
        WHERE r.tenant_id = v_tenant AND r.kind = p_kind AND r.status = 'queued'
          AND (r.available_at IS NULL OR r.available_at <= now())
          AND (NOT v_in_flight OR r.steps > 0)
        ORDER BY (r.steps = 0), (r.priority <> 'interactive'), r.created_at
        LIMIT 1
        FOR UPDATE SKIP LOCKED;
        IF v_run IS NULL THEN  -- all its queued runs are held back (or being claimed)
            v_skip := v_skip || v_tenant;
            v_tenant := NULL;
            CONTINUE;
        END IF;

        RETURN QUERY
        UPDATE public.runs r
        SET status = 'running', lease_owner = p_worker, lease_epoch = r.lease_epoch + 1,
            lease_expires_at = now() + make_interval(secs => p_lease_seconds),
            -- The moment of the claim, not the start of its transaction (which may have
            -- waited for a tenant row): queue waits are never negative.
            available_at = NULL, started_at = coalesce(r.started_at, clock_timestamp()),
            updated_at = now()
        WHERE r.tenant_id = v_tenant AND r.run_id = v_run
        RETURNING r.tenant_id, r.run_id, r.lease_epoch, NULL::text, NULL::timestamptz,
                  false;
        UPDATE public.tenant_load SET last_claim_at = clock_timestamp()
        WHERE tenant_load.tenant_id = v_tenant;
        v_claimed := v_claimed + 1;
        v_tenant := NULL;
        v_run := NULL;
    END LOOP;
END
$$;
REVOKE ALL ON FUNCTION tenantry_claim_runs(text, integer, double precision, text, boolean)
    FROM PUBLIC;
GRANT EXECUTE ON FUNCTION tenantry_claim_runs(text, integer, double precision, text, boolean)
    TO tenantry_app;

-- The activity dispatcher's claim of 0020, with the same first step: the tasks of dead
-- registered dispatchers (a `tenantry activity-worker` registers as a worker loop does)
-- are re-leased at once. Same signature and columns.
CREATE OR REPLACE FUNCTION tenantry_claim_activities(p_worker text, p_batch integer,
                                          p_lease_seconds double precision)
RETURNS TABLE (tenant_id text, run_id uuid, lease_epoch bigint)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, public AS $$
DECLARE
    v_claimed integer;
    v_tenant text;
    v_run uuid;
    v_skip text[] := '{}';
    v_dead text[];
    v_count integer;
BEGIN
    -- Dead registered dispatchers' tasks first, as in tenantry_claim_runs above.
    v_dead := public.tenantry_dead_workers();
    v_claimed := 0;
    IF cardinality(v_dead) > 0 THEN
        RETURN QUERY
        WITH orphaned AS (
            SELECT r.tenant_id, r.run_id FROM public.runs r
            WHERE r.status = 'running' AND r.lease_owner = ANY (v_dead)
              AND r.kind = 'activity'
            ORDER BY r.lease_expires_at
            LIMIT p_batch
            FOR UPDATE SKIP LOCKED
        )
        UPDATE public.runs r
        SET lease_owner = p_worker, lease_epoch = r.lease_epoch + 1,
            lease_expires_at = now() + make_interval(secs => p_lease_seconds),
            updated_at = now()
        FROM orphaned
        WHERE r.tenant_id = orphaned.tenant_id AND r.run_id = orphaned.run_id
        RETURNING r.tenant_id, r.run_id, r.lease_epoch;
        GET DIAGNOSTICS v_claimed = ROW_COUNT;
        PERFORM public.tenantry_forget_dead_workers(v_dead);
    END IF;

    IF v_claimed < p_batch THEN
        RETURN QUERY
        WITH expired AS (
            SELECT r.tenant_id, r.run_id FROM public.runs r
            WHERE r.status = 'running' AND r.lease_expires_at < now()
              AND r.kind = 'activity'
            ORDER BY r.lease_expires_at
            LIMIT p_batch - v_claimed
            FOR UPDATE SKIP LOCKED
        )
        UPDATE public.runs r
        SET lease_owner = p_worker, lease_epoch = r.lease_epoch + 1,
            lease_expires_at = now() + make_interval(secs => p_lease_seconds),
            updated_at = now()
        FROM expired
        WHERE r.tenant_id = expired.tenant_id AND r.run_id = expired.run_id
        RETURNING r.tenant_id, r.run_id, r.lease_epoch;
        GET DIAGNOSTICS v_count = ROW_COUNT;
        v_claimed := v_claimed + v_count;
    END IF;

    WHILE v_claimed < p_batch LOOP
        -- Never wait for a tenant row another claimer holds (SKIP LOCKED throughout): a
        -- dispatcher coming back empty polls again, which is cheaper than a lock cycle.
        SELECT l.tenant_id INTO v_tenant
        FROM public.tenant_load l
        JOIN public.tenant_policies p ON p.tenant_id = l.tenant_id
        JOIN public.tenant_budget b ON b.tenant_id = l.tenant_id
        WHERE public.tenantry_may_claim(l, p, b) AND l.tenant_id <> ALL (v_skip)
          AND (SELECT count(*) FROM public.runs a
               WHERE a.tenant_id = l.tenant_id AND a.kind = 'activity'
                 AND a.status = 'running') < p.max_activity_slots
        ORDER BY l.running::float8 / p.weight, l.last_claim_at NULLS FIRST, l.tenant_id
        LIMIT 1
        FOR UPDATE OF l SKIP LOCKED;
        EXIT WHEN v_tenant IS NULL;

        SELECT r.run_id INTO v_run FROM public.runs r
        WHERE r.tenant_id = v_tenant AND r.kind = 'activity' AND r.status = 'queued'
          AND (r.available_at IS NULL OR r.available_at <= now())
        ORDER BY (r.priority <> 'interactive'), r.created_at
        LIMIT 1
        FOR UPDATE SKIP LOCKED;
        IF v_run IS NULL THEN
            v_skip := v_skip || v_tenant;
            v_tenant := NULL;
            CONTINUE;
        END IF;

        RETURN QUERY
        UPDATE public.runs r
        SET status = 'running', lease_owner = p_worker, lease_epoch = r.lease_epoch + 1,
            lease_expires_at = now() + make_interval(secs => p_lease_seconds),
            available_at = NULL, started_at = coalesce(r.started_at, clock_timestamp()),
            updated_at = now()
        WHERE r.tenant_id = v_tenant AND r.run_id = v_run
        RETURNING r.tenant_id, r.run_id, r.lease_epoch;
        UPDATE public.tenant_load SET last_claim_at = clock_timestamp()
        WHERE tenant_load.tenant_id = v_tenant;
        v_claimed := v_claimed + 1;
        v_tenant := NULL;
        v_run := NULL;
    END LOOP;
END
$$;
