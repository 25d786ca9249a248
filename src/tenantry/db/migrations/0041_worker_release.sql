-- Releases the database knows (issue 37 item 3, docs/how-to/upgrade.md): each registered
-- worker says which release it is, so `tenantry migrate --status` and the console can tell
-- whether a schema change leaves a connected release behind. Expand only: a column with a
-- default and a new function beside the old one.
--
-- Workers of 0.1.0 register through tenantry_register_worker(text, integer, boolean),
-- which names no release: it stays for them (routines/register_worker.sql, now recording
-- 0.1.0), and the default is theirs for the seconds between this migration and the
-- routines step. Later workers call tenantry_register_worker_v2 with their own release.
-- Its routines: register_worker_v2, register_worker, console_releases.

ALTER TABLE worker_sessions ADD COLUMN release text NOT NULL DEFAULT '0.1.0';

-- `api` and `worker` check at start that the schema's release serves theirs (the newest
-- release that migrated the database, in the migrator's table): the login reads it before
-- it switches to any role, as it reads schema_migrations (0015).
GRANT SELECT ON schema_releases TO tenantry_login;
