-- The activity dispatcher's claim (ADR 0013): the fair claim's rules (tenantry_claim_runs:
-- the tenant with the smallest running / weight under its policy, its load row locked)
-- plus the tenant's max_activity_slots counted over its running activity tasks. A function
-- of its own so the platform's claim of agent runs is untouched.
--
-- In order: the tasks of dead registered dispatchers (a `tenantry activity-worker`
-- registers as a worker loop does, ADR 0018) are re-leased at once; then expired leases
-- (they count as running already, so they never push a tenant past its slots); then queued
-- tasks. A tenant being moved to another cell (tenantry_frozen_tenants) is left out.

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
    -- Dead registered dispatchers' tasks first, as in tenantry_claim_runs (never the
    -- claimer's own: it is alive, whatever its session says).
    v_dead := array_remove(public.tenantry_dead_workers(), p_worker);
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
REVOKE ALL ON FUNCTION tenantry_claim_activities(text, integer, double precision)
    FROM PUBLIC, tenantry_app, tenantry_console;
GRANT EXECUTE ON FUNCTION tenantry_claim_activities(text, integer, double precision)
    TO tenantry_app;
