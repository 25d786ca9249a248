-- THE claim: the one seam through which work is handed to workers (runs of p_kind, 'agent'
-- or a library user's 'task'). Claims are cross-tenant, so it is SECURITY DEFINER and
-- returns nothing but what a worker needs to start: tenant, run, the new lease epoch, and
-- for a re-leased run what it was taken from (for the claimer's log; NULL for queued runs).
--
-- In order:
--   1. the running runs of dead registered workers (tenantry_dead_workers, ADR 0018), as
--      many as the batch takes, whatever their leases say: voided like expired ones (epoch
--      + 1), so a write the dead owner left in flight is refused;
--   2. expired leases (those runs were in flight and count as running already);
--   3. the fair claim (ADR 0004), one run at a time: the tenant using the smallest share
--      of its weight (running / weight; ties: the one served longest ago) among tenants
--      with queued work, under max_running, with tokens in their bucket and spend under
--      their cap (tenantry_may_claim); inside a tenant, runs already in flight before new
--      ones, interactive before batch, oldest first.
-- The tenant's load row is locked, so concurrent claimers never push one past max_running
-- (the first pick waits for a row another claimer holds; later picks skip it, so claimers
-- never wait for each other in a cycle); runs are locked SKIP LOCKED, so none is claimed
-- twice. Nothing is held after the transaction: no lock spans a model call.
--
-- p_in_flight_first, the caller's view of the cell's load (shedding, ADR 0008): serve in
-- two tiers — first runs that already took steps, across tenants, the tenant with the
-- smallest running / weight first as always; then, when no tenant has one left to claim,
-- new runs in the usual fair order. Every other rule holds in both tiers: max_running,
-- token buckets, spend caps, the locking order.
--
-- A tenant being moved to another cell (tenantry_frozen_tenants, ADR 0029) is left out of
-- every step.

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
    -- Held shared until this claim commits. Never the claimer itself: it is alive, whatever
    -- its session says (its lock connection may have dropped a moment before it noticed;
    -- it claims nothing once it has), and its runs are still in its hands.
    v_dead := array_remove(public.tenantry_dead_workers(), p_worker);

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
REVOKE ALL ON FUNCTION tenantry_claim_runs(text, integer, double precision, text, boolean)
    FROM PUBLIC, tenantry_app, tenantry_console;
GRANT EXECUTE ON FUNCTION tenantry_claim_runs(text, integer, double precision, text, boolean)
    TO tenantry_app;
