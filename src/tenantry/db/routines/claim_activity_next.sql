-- The next task of a batch (ADR 0014): a queued task of this tenant AND this activity
-- version (never another tenant's, never another version's), under the same conditions as
-- the fair claim (tenantry_may_claim and max_activity_slots; the batch's previous task has
-- ended, so the batch holds at most one of the tenant's slots at a time). The tenant's
-- load row is locked as the fair claim locks it, so the two never push a tenant past its
-- slots. Nothing for a tenant being moved to another cell.

CREATE OR REPLACE FUNCTION tenantry_claim_activity_next(
    p_worker text, p_tenant text, p_agent uuid, p_version integer,
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
REVOKE ALL ON FUNCTION tenantry_claim_activity_next(text, text, uuid, integer,
    double precision) FROM PUBLIC, tenantry_app, tenantry_console;
GRANT EXECUTE ON FUNCTION tenantry_claim_activity_next(text, text, uuid, integer,
    double precision) TO tenantry_app;
