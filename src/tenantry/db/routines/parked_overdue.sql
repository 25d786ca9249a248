-- Parked runs not woken by their time, for /metrics, by tenant class (plan) — never by
-- tenant id (bounded label sets). A run parked on a model provider (RunParked, ADR 0009)
-- waits with `available_at` set to when it may try again; the workers' waker
-- (tenantry_wake_parked) queues it once that time has passed. A run still parked well past
-- it means the waker is not running or not keeping up. Tenants being moved to another cell
-- are left out, as the waker leaves them. Every plan gets a row (zeros: none overdue).

CREATE OR REPLACE FUNCTION tenantry_parked_overdue()
RETURNS TABLE (tenant_class text, overdue bigint, oldest_overdue_seconds double precision)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public AS $$
    SELECT t.plan, count(r.run_id)::bigint,
           coalesce(extract(epoch FROM now() - min(r.available_at)), 0)::float8
    FROM public.tenants t
    LEFT JOIN public.runs r
        ON r.tenant_id = t.tenant_id AND r.status = 'waiting' AND r.parked_on IS NOT NULL
       AND r.available_at <= now()
       AND r.tenant_id <> ALL (public.tenantry_frozen_tenants())
    GROUP BY t.plan ORDER BY t.plan
$$;
REVOKE ALL ON FUNCTION tenantry_parked_overdue() FROM PUBLIC, tenantry_app, tenantry_console;
GRANT EXECUTE ON FUNCTION tenantry_parked_overdue() TO tenantry_app;
