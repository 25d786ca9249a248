-- Scheduler gauges for /metrics, by tenant class (plan) — never by tenant id (bounded
-- label sets, invariant 10).

CREATE OR REPLACE FUNCTION tenantry_scheduler_gauges()
RETURNS TABLE (tenant_class text, queued bigint, running bigint, waiting bigint,
               oldest_queued_seconds double precision)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public AS $$
    SELECT t.plan, sum(l.queued)::bigint, sum(l.running)::bigint, sum(l.waiting)::bigint,
           coalesce(extract(epoch FROM now() - (
               SELECT min(r.created_at) FROM public.runs r JOIN public.tenants t2
                   ON t2.tenant_id = r.tenant_id
               WHERE r.status = 'queued' AND t2.plan = t.plan)), 0)::float8
    FROM public.tenant_load l JOIN public.tenants t ON t.tenant_id = l.tenant_id
    GROUP BY t.plan ORDER BY t.plan
$$;
REVOKE ALL ON FUNCTION tenantry_scheduler_gauges() FROM PUBLIC, tenantry_app, tenantry_console;
GRANT EXECUTE ON FUNCTION tenantry_scheduler_gauges() TO tenantry_app;
