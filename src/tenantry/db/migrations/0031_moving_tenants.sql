-- Moving a tenant to another cell (issue 20 item 4, ADR 0029). The move is driven from
-- outside (`tenantry cells move`, src/tenantry/cells/move.py); what a cell must do for it
-- is here: hold a tenant still while its rows are copied, and never run it in two cells.
--
-- A frozen tenant, on the cell it leaves:
--   draining  admits nothing (new runs: 'moving', the API: 503 tenant_moving); no claim,
--             wake, expiry, webhook, sweep or retention pass touches its rows; a run in
--             flight goes back to the queue at its next step's commit (hand_back).
--   locked    once none of its runs holds a lease: besides, any insert or update of its
--             runs, approvals, agents, keys, secrets, settings is refused (TR020), so the
--             rows copied are the rows there. The copy is taken in this state.
--   moved     the directory points at the new cell; its rows here are deleted next.
-- and on the cell it arrives at:
--   arriving  its rows are being copied in (with triggers off, as a replica's apply does);
--             nothing claims them until the directory points here and the row is deleted.

CREATE TABLE frozen_tenants (
    tenant_id  text PRIMARY KEY,  -- no foreign key: an arriving tenant has no row yet
    state      text NOT NULL CHECK (state IN ('draining', 'locked', 'moved', 'arriving')),
    move_id    uuid NOT NULL,
    since      timestamptz NOT NULL DEFAULT now()
);
REVOKE ALL ON frozen_tenants FROM PUBLIC;
-- The API's authentication and the intake read it (ids of tenants in a move, no more).
GRANT SELECT ON frozen_tenants TO tenantry_app;

-- Read once per claim; an empty table (no move under way) costs one index-only probe.
CREATE FUNCTION tenantry_frozen_tenants() RETURNS text[]
LANGUAGE sql STABLE SET search_path = pg_catalog, public AS $$
    SELECT coalesce(array_agg(f.tenant_id), '{}') FROM public.frozen_tenants f
$$;

-- A freeze clears every API process's key cache (the next request reads the tenant's
-- state: 503 while it moves); an unfreeze wakes the workers (its runs are claimable).
CREATE FUNCTION tenantry_frozen_changed() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, public AS $$
BEGIN
    PERFORM pg_notify('tenantry_keys', '');
    IF TG_OP = 'DELETE' THEN
        PERFORM pg_notify('tenantry_runnable', '');
    END IF;
    RETURN NULL;
END
$$;
CREATE TRIGGER frozen_tenants_changed AFTER INSERT OR UPDATE OR DELETE ON frozen_tenants
FOR EACH STATEMENT EXECUTE FUNCTION tenantry_frozen_changed();

-- The backstop of 'locked': whatever path a write takes (an API process whose cache has
-- not heard yet, the console, an operator call), it cannot change a row being copied.
-- A definer, so every role that writes these tables may check (none may read the rest).
CREATE FUNCTION tenantry_refuse_frozen() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM public.frozen_tenants f
               WHERE f.tenant_id = NEW.tenant_id AND f.state <> 'draining') THEN
        RAISE EXCEPTION 'tenant % is moving to another cell', NEW.tenant_id
            USING ERRCODE = 'TR020';
    END IF;
    RETURN NEW;
END
$$;
REVOKE ALL ON FUNCTION tenantry_refuse_frozen() FROM PUBLIC;

-- The tables a request or a background job writes. The event log and the facts written
-- with a step are not here: only a leased run's commit writes them, and a locked tenant
-- has no leased run (that is the condition of 'locked'); a trigger there would cost every
-- step for nothing.
DO $$
DECLARE
    t text;
BEGIN
    FOREACH t IN ARRAY ARRAY['runs', 'approvals', 'tenants', 'agents', 'agent_versions',
            'agent_version_flags', 'api_keys', 'secrets', 'tenant_keys', 'tool_servers',
            'tenant_policies', 'retention_policies', 'model_accounts', 'activity_bundles',
            'activity_versions'] LOOP
        EXECUTE format('CREATE TRIGGER %I BEFORE INSERT OR UPDATE ON %I FOR EACH ROW '
                       'EXECUTE FUNCTION tenantry_refuse_frozen()', t || '_refuse_frozen', t);
    END LOOP;
END
$$;

-- Every claim, wake, expiry, sweep and retention pass below is the one before it (the
-- migration named beside each) with a frozen tenant's rows left out; commit_step also
-- answers hand_back.

CREATE OR REPLACE FUNCTION tenantry_claim_runs(p_worker text, p_batch integer,
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
    v_frozen text[] := public.tenantry_frozen_tenants();
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
              AND r.tenant_id <> ALL (v_frozen)
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
              AND r.tenant_id <> ALL (v_frozen)
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
              AND l.tenant_id <> ALL (v_frozen)
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
              AND l.tenant_id <> ALL (v_frozen)
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

CREATE OR REPLACE FUNCTION tenantry_claim_runs_fifo(p_worker text, p_batch integer,
                                         p_lease_seconds double precision)
RETURNS TABLE (tenant_id text, run_id uuid, lease_epoch bigint)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, public AS $$
DECLARE
    v_tenants text[];
    v_frozen text[] := public.tenantry_frozen_tenants();
BEGIN
    CREATE TEMP TABLE IF NOT EXISTS fifo_picked (tenant_id text, run_id uuid, expired boolean)
        ON COMMIT DROP;
    INSERT INTO fifo_picked
    SELECT r.tenant_id, r.run_id, true FROM public.runs r
    WHERE r.status = 'running' AND r.lease_expires_at < now() AND r.kind = 'agent'
      AND r.tenant_id <> ALL (v_frozen)
    ORDER BY r.lease_expires_at LIMIT p_batch
    FOR UPDATE SKIP LOCKED;
    INSERT INTO fifo_picked
    SELECT r.tenant_id, r.run_id, false FROM public.runs r
    WHERE r.status = 'queued' AND r.kind = 'agent' AND r.tenant_id <> ALL (v_frozen)
      AND (r.available_at IS NULL OR r.available_at <= now())
    ORDER BY r.created_at LIMIT greatest(p_batch - (SELECT count(*) FROM fifo_picked), 0)
    FOR UPDATE SKIP LOCKED;
    -- The status change's trigger locks each tenant's load row: take them first, in one
    -- order, so two claimers (or a claimer and a driver) never wait for each other in a
    -- cycle.
    SELECT array_agg(DISTINCT f.tenant_id ORDER BY f.tenant_id) INTO v_tenants
    FROM fifo_picked f WHERE NOT f.expired;
    PERFORM 1 FROM public.tenant_load l WHERE l.tenant_id = ANY (v_tenants)
    ORDER BY l.tenant_id FOR UPDATE;
    RETURN QUERY
    UPDATE public.runs r
    SET status = 'running', lease_owner = p_worker, lease_epoch = r.lease_epoch + 1,
        lease_expires_at = now() + make_interval(secs => p_lease_seconds),
        available_at = NULL, started_at = coalesce(r.started_at, clock_timestamp()),
        updated_at = now()
    FROM fifo_picked f
    WHERE r.tenant_id = f.tenant_id AND r.run_id = f.run_id
    RETURNING r.tenant_id, r.run_id, r.lease_epoch;
    DROP TABLE fifo_picked;
END
$$;

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
    v_frozen text[] := public.tenantry_frozen_tenants();
BEGIN
    -- Dead registered dispatchers' tasks first, as in tenantry_claim_runs above.
    v_dead := public.tenantry_dead_workers();
    v_claimed := 0;
    IF cardinality(v_dead) > 0 THEN
        RETURN QUERY
        WITH orphaned AS (
            SELECT r.tenant_id, r.run_id FROM public.runs r
            WHERE r.status = 'running' AND r.lease_owner = ANY (v_dead)
              AND r.kind = 'activity' AND r.tenant_id <> ALL (v_frozen)
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
              AND r.kind = 'activity' AND r.tenant_id <> ALL (v_frozen)
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
          AND l.tenant_id <> ALL (v_frozen)
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

CREATE OR REPLACE FUNCTION tenantry_claim_activity_next(p_worker text, p_tenant text, p_agent uuid,
                                             p_version integer,
                                             p_lease_seconds double precision)
RETURNS TABLE (tenant_id text, run_id uuid, lease_epoch bigint)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, public AS $$
DECLARE
    v_tenant text;
    v_run uuid;
BEGIN
    SELECT l.tenant_id INTO v_tenant
    FROM public.tenant_load l
    JOIN public.tenant_policies p ON p.tenant_id = l.tenant_id
    JOIN public.tenant_budget b ON b.tenant_id = l.tenant_id
    WHERE l.tenant_id = p_tenant AND public.tenantry_may_claim(l, p, b)
      AND p_tenant <> ALL (public.tenantry_frozen_tenants())
      AND (SELECT count(*) FROM public.runs a
           WHERE a.tenant_id = l.tenant_id AND a.kind = 'activity'
             AND a.status = 'running') < p.max_activity_slots
    FOR UPDATE OF l;
    IF v_tenant IS NULL THEN
        RETURN;
    END IF;
    SELECT r.run_id INTO v_run FROM public.runs r
    WHERE r.tenant_id = p_tenant AND r.kind = 'activity' AND r.status = 'queued'
      AND r.agent_id = p_agent AND r.agent_version = p_version
      AND (r.available_at IS NULL OR r.available_at <= now())
    ORDER BY (r.priority <> 'interactive'), r.created_at
    LIMIT 1
    FOR UPDATE SKIP LOCKED;
    IF v_run IS NULL THEN
        RETURN;
    END IF;
    RETURN QUERY
    UPDATE public.runs r
    SET status = 'running', lease_owner = p_worker, lease_epoch = r.lease_epoch + 1,
        lease_expires_at = now() + make_interval(secs => p_lease_seconds),
        available_at = NULL, started_at = coalesce(r.started_at, clock_timestamp()),
        updated_at = now()
    WHERE r.tenant_id = p_tenant AND r.run_id = v_run
    RETURNING r.tenant_id, r.run_id, r.lease_epoch;
    UPDATE public.tenant_load SET last_claim_at = clock_timestamp()
    WHERE tenant_load.tenant_id = p_tenant;
END
$$;

CREATE OR REPLACE FUNCTION tenantry_claim_webhooks(
    p_batch integer, p_seconds double precision, p_max_attempts integer,
    p_per_tenant integer, p_busy_tenants text[], p_busy_counts integer[])
RETURNS TABLE (tenant_id text, run_id uuid, attempts integer)
LANGUAGE sql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, public AS $$
    WITH busy AS (
        SELECT b.tenant_id, b.n FROM unnest(p_busy_tenants, p_busy_counts) AS b(tenant_id, n)
    ), ranked AS (
        SELECT r.tenant_id, r.run_id, r.webhook_next_at,
               row_number() OVER (PARTITION BY r.tenant_id ORDER BY r.webhook_next_at) AS nth
        FROM public.runs r
        WHERE r.webhook_state = 'pending' AND r.webhook_next_at <= now()
          AND r.webhook_attempts < p_max_attempts
          AND r.tenant_id <> ALL (public.tenantry_frozen_tenants())
    ), due AS (
        SELECT r.tenant_id, r.run_id FROM public.runs r
        JOIN ranked k ON k.tenant_id = r.tenant_id AND k.run_id = r.run_id
        LEFT JOIN busy b ON b.tenant_id = k.tenant_id
        WHERE k.nth + coalesce(b.n, 0) <= p_per_tenant
          AND r.webhook_state = 'pending' AND r.webhook_attempts < p_max_attempts
        ORDER BY k.webhook_next_at
        LIMIT p_batch
        FOR UPDATE OF r SKIP LOCKED
    )
    UPDATE public.runs r
    SET webhook_next_at = now() + make_interval(secs => p_seconds),
        webhook_attempts = r.webhook_attempts + 1
    FROM due
    WHERE r.tenant_id = due.tenant_id AND r.run_id = due.run_id
    RETURNING r.tenant_id, r.run_id, r.webhook_attempts
$$;

CREATE OR REPLACE FUNCTION tenantry_wake_parked(p_models text[], p_limit integer)
RETURNS integer
LANGUAGE sql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, public AS $$
    WITH due AS (
        SELECT r.tenant_id, r.run_id FROM public.runs r
        WHERE r.status = 'waiting' AND r.parked_on IS NOT NULL
          AND r.tenant_id <> ALL (public.tenantry_frozen_tenants())
          AND (CASE WHEN p_models IS NULL THEN r.available_at <= now()
                    ELSE r.parked_on && p_models OR '*' = ANY (p_models) END)
        LIMIT p_limit
        FOR UPDATE SKIP LOCKED
    ), woken AS (
        UPDATE public.runs r
        SET status = 'queued', parked_on = NULL, available_at = NULL, updated_at = now()
        FROM due WHERE r.tenant_id = due.tenant_id AND r.run_id = due.run_id
        RETURNING 1
    )
    SELECT count(*)::integer FROM woken
$$;

CREATE OR REPLACE FUNCTION tenantry_expired_approvals(p_now timestamptz, p_batch integer)
RETURNS TABLE (tenant_id text, approval_id uuid)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public AS $$
    SELECT a.tenant_id, a.approval_id FROM public.approvals a
    WHERE a.status = 'pending' AND a.expires_at <= p_now
      AND a.tenant_id <> ALL (public.tenantry_frozen_tenants())
    ORDER BY a.expires_at
    LIMIT p_batch
$$;

CREATE OR REPLACE FUNCTION tenantry_sweep_reservations(p_limit integer) RETURNS integer
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, public AS $$
DECLARE
    v_forfeited integer;
    v_tenant text;
BEGIN
    WITH stale AS (
        SELECT b.tenant_id, b.reservation_id, b.cost_micros
        FROM public.budget_reservations b
        JOIN public.runs r ON r.tenant_id = b.tenant_id AND r.run_id = b.run_id
        WHERE b.status = 'reserved'
          AND (r.lease_epoch <> b.lease_epoch OR r.status <> 'running')
          AND b.tenant_id <> ALL (public.tenantry_frozen_tenants())
        LIMIT p_limit
        FOR UPDATE OF b SKIP LOCKED
    ), closed AS (
        UPDATE public.budget_reservations b SET status = 'forfeited', closed_at = now()
        FROM stale WHERE b.tenant_id = stale.tenant_id
                     AND b.reservation_id = stale.reservation_id
        RETURNING b.tenant_id, b.cost_micros, b.counted
    ), per_tenant AS (
        SELECT tenant_id, sum(cost_micros) AS cost FROM closed WHERE counted
        GROUP BY tenant_id
    ), released AS (
        UPDATE public.tenant_budget l
        SET reserved_micros = greatest(l.reserved_micros - per_tenant.cost, 0)
        FROM per_tenant WHERE l.tenant_id = per_tenant.tenant_id
        RETURNING 1
    )
    SELECT count(*)::integer INTO v_forfeited FROM closed;

    FOR v_tenant IN
        SELECT b.tenant_id FROM public.tenant_budget b
        WHERE b.tenant_id IN (SELECT r.tenant_id FROM public.budget_reservations r
                              WHERE r.unfolded)
          AND b.tenant_id <> ALL (public.tenantry_frozen_tenants())
        LIMIT p_limit
        FOR UPDATE OF b SKIP LOCKED
    LOOP
        PERFORM public.tenantry_fold_closings(v_tenant);
    END LOOP;
    RETURN v_forfeited;
END
$$;

CREATE OR REPLACE FUNCTION tenantry_claim_blob_deletions(p_limit integer, p_seconds double precision)
RETURNS TABLE (tenant_id text, ref text)
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, public AS $$
    UPDATE public.blob_deletions d
    SET attempts = d.attempts + 1,
        next_at = clock_timestamp() + make_interval(secs => p_seconds)
    FROM (SELECT x.tenant_id, x.ref FROM public.blob_deletions x
          WHERE x.next_at <= clock_timestamp()
            AND x.tenant_id <> ALL (public.tenantry_frozen_tenants())
          ORDER BY x.next_at LIMIT p_limit FOR UPDATE SKIP LOCKED) due
    WHERE d.tenant_id = due.tenant_id AND d.ref = due.ref
    RETURNING d.tenant_id, d.ref
$$;

CREATE OR REPLACE FUNCTION tenantry_cleanup_due(p_every_seconds double precision, p_limit integer)
RETURNS TABLE (tenant_id text)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public AS $$
    SELECT t.tenant_id FROM public.tenants t
    LEFT JOIN public.cleanup_leases l ON l.tenant_id = t.tenant_id
    WHERE t.tenant_id <> ALL (public.tenantry_frozen_tenants())
      AND (l.expires_at IS NULL OR l.expires_at < clock_timestamp())
      AND (l.last_pass_at IS NULL
           OR l.last_pass_at < clock_timestamp() - make_interval(secs => p_every_seconds)
           OR t.erased_at IS NOT NULL)
    ORDER BY l.last_pass_at NULLS FIRST, t.tenant_id
    LIMIT p_limit
$$;

CREATE OR REPLACE FUNCTION tenantry_take_cleanup_lease(p_tenant text, p_owner text, p_seconds double precision)
RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public AS $$
DECLARE
    v_epoch bigint;
BEGIN
    IF p_tenant = ANY (public.tenantry_frozen_tenants()) THEN
        RETURN NULL;  -- moving: its rows stay as they are until the move ends
    END IF;
    INSERT INTO public.cleanup_leases AS l (tenant_id, owner, epoch, expires_at)
    VALUES (p_tenant, p_owner, 1, clock_timestamp() + make_interval(secs => p_seconds))
    ON CONFLICT (tenant_id) DO UPDATE
        SET owner = p_owner, epoch = l.epoch + 1,
            expires_at = clock_timestamp() + make_interval(secs => p_seconds)
        WHERE l.owner IS NULL OR l.expires_at IS NULL OR l.expires_at < clock_timestamp()
           OR l.owner = p_owner
    RETURNING l.epoch INTO v_epoch;
    RETURN v_epoch;
END
$$;

CREATE OR REPLACE FUNCTION tenantry_keep_cleanup_lease(p_tenant text, p_owner text, p_epoch bigint,
                                            p_seconds double precision, p_deleted bigint)
RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public AS $$
BEGIN
    UPDATE public.cleanup_leases SET
        expires_at = CASE WHEN p_seconds IS NULL THEN NULL
                          ELSE clock_timestamp() + make_interval(secs => p_seconds) END,
        owner = CASE WHEN p_seconds IS NULL THEN NULL ELSE owner END,
        last_pass_at = CASE WHEN p_seconds IS NULL THEN clock_timestamp() ELSE last_pass_at END,
        last_deleted = CASE WHEN p_seconds IS NULL THEN p_deleted ELSE last_deleted END
    WHERE tenant_id = p_tenant AND owner = p_owner AND epoch = p_epoch
      AND expires_at >= clock_timestamp()
      AND p_tenant <> ALL (public.tenantry_frozen_tenants());  -- a moving tenant's pass stops at once
    RETURN FOUND;
END
$$;

CREATE OR REPLACE FUNCTION tenantry_create_runs(p_groups jsonb)
RETURNS TABLE (i integer, outcome text, run_id uuid, status text, detail jsonb)
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, public AS $$
#variable_conflict use_column
DECLARE
    g jsonb;
    v_tenant text;
    r record;
    f record;
    lim record;
    v_live bigint;
    v_version integer;
    v_model text;
    v_pos integer;
    a_i integer[];
    a_run uuid[];
    a_agent uuid[];
    a_version integer[];
    a_input jsonb[];
    a_key text[];
    a_sha bytea[];
    a_webhook text[];
    a_priority text[];
    a_event jsonb[];
    a_replay text[];  -- an item answered by an earlier item of the batch: its key
    v_made uuid[];
BEGIN
    FOR g IN SELECT value FROM jsonb_array_elements(p_groups) LOOP
        v_tenant := g->>'tenant';
        PERFORM set_config('tenantry.tenant_id', v_tenant, true);
        a_i := '{}'; a_run := '{}'; a_agent := '{}'; a_version := '{}'; a_input := '{}';
        a_key := '{}'; a_sha := '{}'; a_webhook := '{}'; a_priority := '{}'; a_event := '{}';
        a_replay := '{}';
        -- The admission lock of lock_for_admission, taken once for the whole batch.
        SELECT l.queued + l.running + l.waiting AS live, p.max_queued,
               tenantry_month_spend(b) AS month_spend_micros, p.monthly_spend_cap_micros,
               t.erased_at, t.admissions_paused_at,
               EXISTS (SELECT 1 FROM frozen_tenants z WHERE z.tenant_id = l.tenant_id) AS moving
        INTO lim
        FROM tenant_load l JOIN tenant_policies p ON p.tenant_id = l.tenant_id
        JOIN tenant_budget b ON b.tenant_id = l.tenant_id
        JOIN tenants t ON t.tenant_id = l.tenant_id
        WHERE l.tenant_id = v_tenant
        FOR UPDATE OF l;
        v_live := lim.live;

        FOR r IN SELECT x.* FROM jsonb_to_recordset(g->'items') AS x(
                i integer, run_id uuid, agent_id uuid, version integer, input jsonb,
                key text, sha text, webhook text, priority text, shed boolean, event jsonb)
        LOOP
            IF r.key IS NOT NULL THEN
                v_pos := array_position(a_key, r.key);
                IF v_pos IS NOT NULL THEN
                    -- The same key earlier in this batch: answered with that item's run
                    -- (or a conflict, if the bodies differ) once it is inserted, below.
                    a_i := a_i || r.i; a_run := a_run || NULL::uuid;
                    a_agent := a_agent || NULL::uuid; a_version := a_version || NULL::int;
                    a_input := a_input || NULL::jsonb; a_key := a_key || NULL::text;
                    a_sha := a_sha || decode(r.sha, 'hex');
                    a_webhook := a_webhook || NULL::text;
                    a_priority := a_priority || NULL::text; a_event := a_event || NULL::jsonb;
                    a_replay := a_replay || r.key;
                    CONTINUE;
                END IF;
                SELECT k.run_id, k.request_sha256, k.status, k.deleted INTO f FROM (
                    SELECT x.run_id, x.request_sha256, x.status, false AS deleted FROM runs x
                    WHERE x.tenant_id = v_tenant AND x.idempotency_key = r.key
                    UNION ALL
                    SELECT y.run_id, NULL, y.status, true FROM tombstones y
                    WHERE y.tenant_id = v_tenant
                      AND y.idempotency_key_sha256 = sha256(convert_to(r.key, 'UTF8'))
                    LIMIT 1) k;
                IF FOUND THEN
                    i := r.i; run_id := f.run_id; status := f.status; detail := NULL;
                    outcome := CASE WHEN f.deleted THEN 'tombstoned'
                                    WHEN f.request_sha256 <> decode(r.sha, 'hex') THEN 'conflict'
                                    ELSE 'existing' END;
                    RETURN NEXT;
                    CONTINUE;
                END IF;
            END IF;
            i := r.i; run_id := NULL; status := NULL; detail := NULL;
            IF r.shed THEN
                outcome := 'overloaded'; RETURN NEXT; CONTINUE;
            END IF;
            IF lim.moving THEN  -- being moved to another cell: asked again shortly
                outcome := 'moving'; RETURN NEXT; CONTINUE;
            END IF;
            IF r.version IS NULL THEN
                SELECT v.version, v.spec->>'model' INTO v_version, v_model
                FROM agents a JOIN agent_versions v
                  ON v.tenant_id = a.tenant_id AND v.agent_id = a.agent_id
                 AND v.version = a.latest_version
                WHERE a.tenant_id = v_tenant AND a.agent_id = r.agent_id;
                IF NOT FOUND THEN
                    outcome := 'agent_not_found'; RETURN NEXT; CONTINUE;
                END IF;
            ELSE
                SELECT v.version, v.spec->>'model' INTO v_version, v_model
                FROM agent_versions v JOIN agents a
                  ON a.tenant_id = v.tenant_id AND a.agent_id = v.agent_id
                WHERE v.tenant_id = v_tenant AND v.agent_id = r.agent_id
                  AND v.version = r.version;
                IF NOT FOUND THEN
                    outcome := 'version_not_found'; RETURN NEXT; CONTINUE;
                END IF;
            END IF;
            IF v_model IN ('activity', 'task') THEN
                outcome := 'not_runnable'; detail := jsonb_build_object('model', v_model);
                RETURN NEXT; CONTINUE;
            END IF;
            IF lim.erased_at IS NOT NULL THEN
                outcome := 'erased'; RETURN NEXT; CONTINUE;
            END IF;
            IF lim.admissions_paused_at IS NOT NULL THEN
                outcome := 'paused';
                detail := jsonb_build_object('paused_at', lim.admissions_paused_at);
                RETURN NEXT; CONTINUE;
            END IF;
            IF lim.max_queued IS NULL THEN  -- no load row at all, as admit() says
                outcome := 'no_policy'; RETURN NEXT; CONTINUE;
            END IF;
            IF v_live >= lim.max_queued THEN
                outcome := 'quota';
                detail := jsonb_build_object('limit_value', lim.max_queued, 'current', v_live);
                RETURN NEXT; CONTINUE;
            END IF;
            IF lim.monthly_spend_cap_micros IS NOT NULL
               AND lim.month_spend_micros >= lim.monthly_spend_cap_micros THEN
                outcome := 'budget';
                detail := jsonb_build_object('limit_value', lim.monthly_spend_cap_micros,
                                             'current', lim.month_spend_micros);
                RETURN NEXT; CONTINUE;
            END IF;
            v_live := v_live + 1;
            a_i := a_i || r.i; a_run := a_run || r.run_id; a_agent := a_agent || r.agent_id;
            a_version := a_version || v_version; a_input := a_input || r.input;
            a_key := a_key || r.key; a_sha := a_sha || decode(r.sha, 'hex');
            a_webhook := a_webhook || r.webhook; a_priority := a_priority || r.priority;
            a_event := a_event || (r.event || jsonb_build_object('version', v_version));
            a_replay := a_replay || NULL::text;
        END LOOP;

        IF cardinality(a_i) = 0 THEN
            CONTINUE;
        END IF;
        -- Slot 1 is taken by RunCreated in the same transaction, hence last_seq = 1.
        WITH made AS (
            INSERT INTO runs AS n (tenant_id, run_id, agent_id, agent_version, input,
                                   idempotency_key, request_sha256, webhook_url, priority,
                                   kind, last_seq)
            SELECT v_tenant, u.run_id, u.agent_id, u.version, u.input, u.key, u.sha,
                   u.webhook, u.priority, 'agent', 1
            FROM unnest(a_run, a_agent, a_version, a_input, a_key, a_sha, a_webhook,
                        a_priority) AS u(run_id, agent_id, version, input, key, sha,
                                         webhook, priority)
            WHERE u.run_id IS NOT NULL
            ON CONFLICT (tenant_id, idempotency_key) DO NOTHING
            RETURNING n.run_id
        )
        SELECT coalesce(array_agg(made.run_id), '{}') INTO v_made FROM made;
        INSERT INTO run_events (tenant_id, run_id, seq, type, data, format)
        SELECT v_tenant, u.run_id, 1, 'RunCreated', u.event, 1
        FROM unnest(a_run, a_event) AS u(run_id, event)
        WHERE u.run_id = ANY (v_made);

        FOR v_pos IN 1 .. cardinality(a_i) LOOP
            i := a_i[v_pos]; detail := NULL;
            IF a_run[v_pos] IS NULL THEN
                -- a replay of an earlier item of this batch (or of the concurrent request
                -- that took its key)
                SELECT k.run_id, k.request_sha256, k.status INTO f FROM runs k
                WHERE k.tenant_id = v_tenant AND k.idempotency_key = a_replay[v_pos];
                run_id := f.run_id; status := f.status;
                outcome := CASE WHEN f.request_sha256 = a_sha[v_pos] THEN 'existing'
                                ELSE 'conflict' END;
            ELSIF a_run[v_pos] = ANY (v_made) THEN
                outcome := 'created'; run_id := a_run[v_pos]; status := 'queued';
            ELSE
                -- a concurrent request with the same key committed first
                SELECT k.run_id, k.request_sha256, k.status INTO f FROM runs k
                WHERE k.tenant_id = v_tenant AND k.idempotency_key = a_key[v_pos];
                run_id := f.run_id; status := f.status;
                outcome := CASE WHEN f.request_sha256 = a_sha[v_pos] THEN 'existing'
                                ELSE 'conflict' END;
            END IF;
            RETURN NEXT;
        END LOOP;
    END LOOP;
END
$$;

DROP FUNCTION tenantry_commit_step(text, uuid, bigint, text[], jsonb[], smallint[], jsonb[],
    integer, bigint, bigint, bigint, double precision, jsonb, jsonb, jsonb, jsonb);
CREATE FUNCTION tenantry_commit_step(
    p_tenant text, p_run uuid, p_epoch bigint,
    p_types text[], p_data jsonb[], p_formats smallint[], p_payloads jsonb[],
    p_steps integer, p_input_tokens bigint, p_output_tokens bigint, p_cost bigint,
    p_lease_seconds double precision,
    p_audit jsonb, p_settle jsonb, p_usage jsonb, p_terminal jsonb,
    OUT last_seq integer, OUT cancel_requested boolean, OUT hand_back boolean)
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, public AS $$
DECLARE
    v_count integer := cardinality(p_types);
    v_first integer;
BEGIN
    PERFORM set_config('tenantry.tenant_id', p_tenant, true);
    -- The counter row hands out the slots under its row lock (never max(seq)+1); the same
    -- update renews the lease and adds the step to the run's totals.
    UPDATE public.runs r SET
        last_seq = r.last_seq + v_count,
        steps = r.steps + p_steps,
        input_tokens = r.input_tokens + p_input_tokens,
        output_tokens = r.output_tokens + p_output_tokens,
        cost_micros = r.cost_micros + p_cost,
        lease_expires_at = CASE WHEN p_terminal IS NULL
                                THEN now() + make_interval(secs => p_lease_seconds)
                                ELSE r.lease_expires_at END,
        updated_at = now()
    WHERE r.tenant_id = p_tenant AND r.run_id = p_run AND r.lease_epoch = p_epoch
      AND (p_terminal IS NOT NULL OR r.status = 'running')
    RETURNING r.last_seq, r.cancel_requested INTO last_seq, cancel_requested;
    IF NOT FOUND THEN
        RETURN;  -- not ours any more: nothing written
    END IF;
    v_first := last_seq - v_count + 1;

    INSERT INTO public.run_events (tenant_id, run_id, seq, type, data, format)
    SELECT p_tenant, p_run, v_first + e.i - 1, e.type, e.data, e.format
    FROM unnest(p_types, p_data, p_formats) WITH ORDINALITY AS e(type, data, format, i);
    IF p_payloads IS NOT NULL THEN
        INSERT INTO public.run_event_payloads (tenant_id, run_id, seq, data)
        SELECT p_tenant, p_run, v_first + e.i - 1, e.data
        FROM unnest(p_payloads) WITH ORDINALITY AS e(data, i)
        WHERE e.data IS NOT NULL;
    END IF;

    IF p_audit IS NOT NULL THEN
        INSERT INTO public.audit_log (tenant_id, audit_id, run_id, tool, server, key,
                                      arguments_sha256, outcome, detail, duration_ms)
        VALUES (p_tenant, (p_audit->>'audit_id')::uuid, p_run, p_audit->>'tool',
                p_audit->>'server', p_audit->>'key',
                decode(p_audit->>'arguments_sha256', 'hex'), p_audit->>'outcome',
                p_audit->>'detail', (p_audit->>'duration_ms')::double precision);
    END IF;

    IF p_settle IS NOT NULL THEN
        -- The reservation is settled, and the billing fact written, with the reply that
        -- consumed it: both commit or neither does.
        IF NOT public.tenantry_close_reservation(
                p_tenant, p_run, p_epoch, (p_settle->>'reservation_id')::uuid, 'settled',
                (p_settle->>'tokens')::bigint, (p_settle->>'cost_micros')::bigint) THEN
            RAISE EXCEPTION 'the budget reservation is no longer this owner''s to settle'
                USING ERRCODE = 'TR010';
        END IF;
    END IF;
    IF p_usage IS NOT NULL THEN
        INSERT INTO public.usage_facts (tenant_id, run_id, seq, agent_id, agent_version,
                                        provider, account, model, input_tokens,
                                        cached_input_tokens, cache_write_input_tokens,
                                        output_tokens, cost_micros, price_version)
        VALUES (p_tenant, p_run, last_seq, (p_usage->>'agent_id')::uuid,
                (p_usage->>'agent_version')::integer, p_usage->>'provider',
                p_usage->>'account', p_usage->>'model',
                (p_usage->>'input_tokens')::bigint, (p_usage->>'cached_input_tokens')::bigint,
                (p_usage->>'cache_write_input_tokens')::bigint,
                (p_usage->>'output_tokens')::bigint, (p_usage->>'cost_micros')::bigint,
                p_usage->>'price_version');
    END IF;

    IF p_terminal IS NOT NULL THEN
        -- A run with a webhook gets its delivery queued in the same transaction (outbox).
        UPDATE public.runs r SET
            -- JSON null is what the caller's None became: stored as NULL, as before.
            status = p_terminal->>'status',
            answer = nullif(p_terminal->'answer', 'null'::jsonb),
            error = nullif(p_terminal->'error', 'null'::jsonb),
            finished_at = now(), updated_at = now(),
            lease_owner = NULL, lease_expires_at = NULL,
            webhook_state = CASE WHEN r.webhook_url IS NULL THEN NULL ELSE 'pending' END,
            webhook_next_at = CASE WHEN r.webhook_url IS NULL THEN NULL ELSE now() END
        WHERE r.tenant_id = p_tenant AND r.run_id = p_run;
        -- The one change from 0029: a run's end folds its tenant's closed reservations
        -- into the budget row (the run's own settlements all committed before this), so
        -- when a tenant's runs have ended its row is exact again. Last, so the row lock is
        -- held only to the commit; no lock at all when nothing waits to be folded.
        PERFORM 1 FROM public.budget_reservations b
        WHERE b.tenant_id = p_tenant AND b.unfolded LIMIT 1;
        IF FOUND THEN
            PERFORM public.tenantry_fold_closings(p_tenant);
        END IF;
    ELSIF EXISTS (SELECT 1 FROM public.frozen_tenants f WHERE f.tenant_id = p_tenant) THEN
        -- The tenant is being moved: the run goes back to the queue between two steps
        -- (its log complete up to here), under a new epoch so nothing more of this
        -- owner's lands; the move copies it once no run of the tenant holds a lease.
        UPDATE public.runs r SET status = 'queued', lease_owner = NULL,
            lease_expires_at = NULL, lease_epoch = r.lease_epoch + 1, updated_at = now()
        WHERE r.tenant_id = p_tenant AND r.run_id = p_run;
        hand_back := true;
        RETURN;
    END IF;
    hand_back := false;
END
$$;
REVOKE ALL ON FUNCTION tenantry_commit_step(text, uuid, bigint, text[], jsonb[], smallint[],
    jsonb[], integer, bigint, bigint, bigint, double precision, jsonb, jsonb, jsonb, jsonb)
    FROM PUBLIC;
GRANT EXECUTE ON FUNCTION tenantry_commit_step(text, uuid, bigint, text[], jsonb[],
    smallint[], jsonb[], integer, bigint, bigint, bigint, double precision, jsonb, jsonb,
    jsonb, jsonb) TO tenantry_app;
