-- The operator's view of dead-lettered activity tasks across tenants (issue 16, ADR 0013):
-- the console's list and the /metrics gauge by tenant class. Both are the console role's
-- (ADR 0011, as 0019 made the operator's lists): the tenant pool's role cannot call them,
-- so no statement on a tenant connection can page through other tenants' dead letters.

-- Newest first, one tenant's or every tenant's; p_before is the last run id of the
-- previous page. The error is the dispatcher's (reasons and exit statuses, no output).
CREATE FUNCTION tenantry_console_dead_letters(p_tenant text, p_before uuid, p_limit integer)
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

-- Every tenant class with its count of dead letters, zero included (a gauge that vanishes
-- when it reaches zero would hide the recovery).
CREATE FUNCTION tenantry_dead_letter_gauge()
RETURNS TABLE (tenant_class text, dead_lettered bigint)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public AS $$
    SELECT t.plan, count(r.run_id)
    FROM public.tenants t
    LEFT JOIN public.runs r
      ON r.tenant_id = t.tenant_id AND r.status = 'waiting' AND r.kind = 'activity'
     AND coalesce((r.error->>'dead_lettered')::boolean, false)
    GROUP BY t.plan
    ORDER BY t.plan
$$;

REVOKE ALL ON FUNCTION tenantry_console_dead_letters(text, uuid, integer) FROM PUBLIC;
REVOKE ALL ON FUNCTION tenantry_dead_letter_gauge() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION tenantry_console_dead_letters(text, uuid, integer)
    TO tenantry_console;
GRANT EXECUTE ON FUNCTION tenantry_dead_letter_gauge() TO tenantry_console;
