-- The operator's list of dead-lettered activity tasks across tenants (ADR 0013), newest
-- first, one tenant's or every tenant's; p_before is the last run id of the previous page.
-- The error is the dispatcher's (reasons and exit statuses, no output). The console role's
-- alone (ADR 0011): no statement on a tenant connection can page through other tenants'
-- dead letters.

CREATE OR REPLACE FUNCTION tenantry_console_dead_letters(
    p_tenant text, p_before uuid, p_limit integer)
RETURNS TABLE (tenant_id text, tenant_name text, plan text, run_id uuid, activity text,
               version integer, error jsonb, created_at timestamptz, updated_at timestamptz)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public AS $$
    SELECT r.tenant_id, t.name, t.plan, r.run_id, a.name, r.agent_version, r.error,
           r.created_at, r.updated_at
    FROM public.runs r
    JOIN public.tenants t ON t.tenant_id = r.tenant_id
    JOIN public.agents a ON a.tenant_id = r.tenant_id AND a.agent_id = r.agent_id
    WHERE r.status = 'waiting' AND r.kind = 'activity'
      AND coalesce((r.error->>'dead_lettered')::boolean, false)
      AND (p_tenant IS NULL OR r.tenant_id = p_tenant)
      AND (p_before IS NULL OR r.run_id < p_before)
    ORDER BY r.run_id DESC
    LIMIT least(greatest(p_limit, 1), 200)
$$;
REVOKE ALL ON FUNCTION tenantry_console_dead_letters(text, uuid, integer)
    FROM PUBLIC, tenantry_app, tenantry_console;
GRANT EXECUTE ON FUNCTION tenantry_console_dead_letters(text, uuid, integer)
    TO tenantry_console;
