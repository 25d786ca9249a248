-- The releases the database knows, for the console's line on them (docs/how-to/upgrade.md;
-- `tenantry migrate --status` reads the same on the owner's connection, db/fleet.sql):
-- every session of this database by application_name (Tenantry's say tenantry/<version>),
-- the live workers by release (registered, their session lock held: ADR 0018), and what the
-- migrator recorded: migrations, routines, contract steps, and the releases that migrated
-- the database (detail: when one contracted it). One row per fact: (kind, name, detail, n).
--
-- A definer function rather than pg_read_all_stats for the console role: that role would
-- read every session's query text (tenants' data among it); this returns counts by name.
-- Run as the owner, it sees every session's application_name (any role does) and, where
-- the owner may, its backend_type (a parallel query's helpers are not sessions of their
-- own); worker_sessions and the records are the owner's.

CREATE OR REPLACE FUNCTION tenantry_console_releases()
RETURNS TABLE (kind text, name text, detail text, n bigint)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public AS $$
    SELECT 'connection', a.application_name, NULL::text, count(*) FROM pg_stat_activity a
    WHERE a.datname = current_database()
      AND coalesce(a.backend_type, 'client backend') = 'client backend'
    GROUP BY a.application_name
    UNION ALL
    SELECT 'worker', s.release, NULL, count(*) FROM public.worker_sessions s
    WHERE EXISTS (SELECT 1 FROM pg_locks l
                  WHERE l.locktype = 'advisory' AND l.classid = 1415008843
                    AND l.objid = s.lock_key::oid AND l.objsubid = 2
                    AND l.mode = 'ExclusiveLock' AND l.granted)
    GROUP BY s.release
    UNION ALL
    SELECT 'migration', m.version::text, m.sha256, 1 FROM public.schema_migrations m
    UNION ALL
    SELECT 'routine', r.name, r.sha256, 1 FROM public.schema_routines r
    UNION ALL
    SELECT 'contract', c.version::text, c.sha256, 1 FROM public.schema_contract_steps c
    UNION ALL
    SELECT 'release', v.release, v.contracted_at::text, 1 FROM public.schema_releases v
$$;
REVOKE ALL ON FUNCTION tenantry_console_releases()
    FROM PUBLIC, tenantry_app, tenantry_console;
GRANT EXECUTE ON FUNCTION tenantry_console_releases() TO tenantry_console;
