-- Every status of every tenant class (plan), summed: the /metrics gauge tenantry_runs. Live
-- statuses from tenant_load, ended ones from run_status_totals — never by tenant id.

CREATE OR REPLACE FUNCTION tenantry_runs_by_status()
RETURNS TABLE (tenant_class text, status text, runs bigint)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public AS $$
    SELECT t.plan, s.status, sum(s.runs)::bigint
    FROM (
        SELECT l.tenant_id, v.status, v.runs
        FROM public.tenant_load l
        CROSS JOIN LATERAL (VALUES ('queued', l.queued::bigint), ('running', l.running::bigint),
                                   ('waiting', l.waiting::bigint)) AS v (status, runs)
        UNION ALL
        SELECT e.tenant_id, e.status, e.runs FROM public.run_status_totals e
    ) s
    JOIN public.tenants t ON t.tenant_id = s.tenant_id
    GROUP BY t.plan, s.status
    ORDER BY t.plan, s.status
$$;
REVOKE ALL ON FUNCTION tenantry_runs_by_status() FROM PUBLIC, tenantry_app, tenantry_console;
GRANT EXECUTE ON FUNCTION tenantry_runs_by_status() TO tenantry_app;
