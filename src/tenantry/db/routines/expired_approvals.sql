-- Approvals past their time, across tenants, for the expiry sweeper. `p_now` is passed in
-- (not now()) so tests can drive expiry with a clock instead of waiting. None of a tenant
-- being moved to another cell.

CREATE OR REPLACE FUNCTION tenantry_expired_approvals(p_now timestamptz, p_batch integer)
RETURNS TABLE (tenant_id text, approval_id uuid)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public AS $$
    SELECT a.tenant_id, a.approval_id FROM public.approvals a
    WHERE a.status = 'pending' AND a.expires_at <= p_now
      AND a.tenant_id <> ALL (public.tenantry_frozen_tenants())
    ORDER BY a.expires_at
    LIMIT p_batch
$$;
REVOKE ALL ON FUNCTION tenantry_expired_approvals(timestamptz, integer)
    FROM PUBLIC, tenantry_app, tenantry_console;
GRANT EXECUTE ON FUNCTION tenantry_expired_approvals(timestamptz, integer) TO tenantry_app;
