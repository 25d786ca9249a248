-- The cell's queue depth (cross-tenant, one number): admission's shedding levels (ADR 0008)
-- and the console's tenants page read it.

CREATE OR REPLACE FUNCTION tenantry_queue_depth() RETURNS bigint
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public AS $$
    SELECT coalesce(sum(queued), 0)::bigint FROM public.tenant_load
$$;
REVOKE ALL ON FUNCTION tenantry_queue_depth() FROM PUBLIC, tenantry_app, tenantry_console;
GRANT EXECUTE ON FUNCTION tenantry_queue_depth() TO tenantry_app;
GRANT EXECUTE ON FUNCTION tenantry_queue_depth() TO tenantry_console;
