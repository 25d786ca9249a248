-- The registration of a worker of release 0.1.0, which names no release (ADR 0018):
-- tenantry_register_worker_v2 for that release. Kept while a 0.1.0 worker may call it;
-- a contract step drops it once none can (docs/reference/architecture.md, "Changing the
-- schema"). Later workers call tenantry_register_worker_v2 themselves.

CREATE OR REPLACE FUNCTION tenantry_register_worker(
    p_worker text, p_key integer, p_rejoin boolean)
RETURNS text
LANGUAGE sql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, public AS $$
    SELECT public.tenantry_register_worker_v2(p_worker, p_key, p_rejoin, '0.1.0')
$$;
REVOKE ALL ON FUNCTION tenantry_register_worker(text, integer, boolean)
    FROM PUBLIC, tenantry_app, tenantry_console;
GRANT EXECUTE ON FUNCTION tenantry_register_worker(text, integer, boolean) TO tenantry_app;
