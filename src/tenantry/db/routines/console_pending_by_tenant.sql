-- The console's approvals inbox by tenant, so one tenant's thousands of pending approvals
-- cannot push another tenant's one off the page: the tenants with pending approvals (the
-- longest waiting first), how many each has and since when, and each one's first p_each of
-- them. One row per approval shown; a tenant's count and oldest repeat on each of its rows.
-- The console role's alone.

CREATE OR REPLACE FUNCTION tenantry_console_pending_by_tenant(
    p_tenants integer, p_each integer)
RETURNS TABLE (tenant_id text, pending bigint, oldest timestamptz, approval_id uuid,
               run_id uuid, key text, tool text, arguments jsonb, requested_at timestamptz,
               expires_at timestamptz)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public AS $$
    WITH waiting AS (
        SELECT a.tenant_id, count(*) AS pending, min(a.requested_at) AS oldest
        FROM public.approvals a
        WHERE a.status = 'pending'
        GROUP BY a.tenant_id
        ORDER BY oldest, a.tenant_id
        LIMIT least(greatest(p_tenants, 1), 200)
    )
    SELECT w.tenant_id, w.pending, w.oldest, f.approval_id, f.run_id, f.key, f.tool,
           f.arguments, f.requested_at, f.expires_at
    FROM waiting w
    CROSS JOIN LATERAL (
        SELECT a.approval_id, a.run_id, a.key, a.tool, a.arguments, a.requested_at,
               a.expires_at
        FROM public.approvals a
        WHERE a.tenant_id = w.tenant_id AND a.status = 'pending'
        ORDER BY a.approval_id
        LIMIT least(greatest(p_each, 1), 50)
    ) f
    ORDER BY w.oldest, w.tenant_id, f.approval_id
$$;
REVOKE ALL ON FUNCTION tenantry_console_pending_by_tenant(integer, integer)
    FROM PUBLIC, tenantry_app, tenantry_console;
GRANT EXECUTE ON FUNCTION tenantry_console_pending_by_tenant(integer, integer)
    TO tenantry_console;
