-- One tenant's pending approvals, oldest first: the console's inbox filtered by tenant,
-- page by page. The console role's alone.

CREATE OR REPLACE FUNCTION tenantry_console_pending_approvals_of(p_tenant text, p_after uuid,
                                                                 p_limit integer)
RETURNS TABLE (tenant_id text, approval_id uuid, run_id uuid, key text, tool text,
               arguments jsonb, requested_at timestamptz, expires_at timestamptz)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public AS $$
    SELECT a.tenant_id, a.approval_id, a.run_id, a.key, a.tool, a.arguments,
           a.requested_at, a.expires_at
    FROM public.approvals a
    WHERE a.tenant_id = p_tenant AND a.status = 'pending'
      AND (p_after IS NULL OR a.approval_id > p_after)
    ORDER BY a.approval_id
    LIMIT least(greatest(p_limit, 1), 200)
$$;
REVOKE ALL ON FUNCTION tenantry_console_pending_approvals_of(text, uuid, integer)
    FROM PUBLIC, tenantry_app, tenantry_console;
GRANT EXECUTE ON FUNCTION tenantry_console_pending_approvals_of(text, uuid, integer)
    TO tenantry_console;
