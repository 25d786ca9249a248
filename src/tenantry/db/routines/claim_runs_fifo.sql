-- The old order — oldest queued run of any tenant — kept as a baseline for the fairness
-- benchmark (TENANTRY_CLAIM_ORDER=fifo). It ignores every policy: never for production.
-- It still leaves out a tenant being moved to another cell.

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
REVOKE ALL ON FUNCTION tenantry_claim_runs_fifo(text, integer, double precision)
    FROM PUBLIC, tenantry_app, tenantry_console;
GRANT EXECUTE ON FUNCTION tenantry_claim_runs_fifo(text, integer, double precision)
    TO tenantry_app;
