-- Release 0.1.0's worker registration, retired (docs/how-to/upgrade.md, "After the contract
-- step"). 0.1.0's workers and activity dispatchers register through
-- tenantry_register_worker(text, integer, boolean), which 0.2.0's schema keeps as 0.1.0
-- made it (its INSERT leaves out worker_sessions.release, whose default names 0.1.0:
-- migration 0041); 0.2.0's processes call tenantry_register_worker_v2 with their release.
--
-- 0.1.0 checks no release at start, so its processes would start on a contracted database
-- as on any other. What is left of the function answers their first registration with
-- the line saying why, which 0.1.0 logs ("no worker session connection, claiming nothing:
-- …"): it waits out a failed registration as an outage, so the process stays up, never
-- registers and claims nothing. A dropped function would say only that it does not exist.
-- Later releases refuse a contracted database at start themselves.
-- retires: register_worker

CREATE OR REPLACE FUNCTION tenantry_register_worker(
    p_worker text, p_key integer, p_rejoin boolean)
RETURNS text
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, public AS $$
DECLARE
    v_by text;
BEGIN
    -- The release whose `tenantry migrate --contract` ran last (the owner's table: hence
    -- SECURITY DEFINER; it is read and nothing else).
    SELECT release INTO v_by FROM public.schema_releases
    WHERE contracted_at IS NOT NULL ORDER BY contracted_at DESC LIMIT 1;
    v_by := coalesce(v_by, '0.2.0');
    RAISE EXCEPTION USING MESSAGE = format(
        'this database was contracted by release %s (tenantry migrate --contract), which '
        'removed what releases before %s use: this is release 0.1.0; run a release the '
        'database serves (''tenantry migrate --status'' says which)',
        v_by, split_part(v_by, '.', 1) || '.' || split_part(v_by, '.', 2));
END
$$;
REVOKE ALL ON FUNCTION tenantry_register_worker(text, integer, boolean)
    FROM PUBLIC, tenantry_app, tenantry_console;
-- The worker's role may still call it: to be told, not "permission denied".
GRANT EXECUTE ON FUNCTION tenantry_register_worker(text, integer, boolean) TO tenantry_app;
