-- What is connected to this database, by release (db/release.py, docs/how-to/upgrade.md).
-- Read by `tenantry migrate` (its window check, `--status`, `--contract`) on the owner's
-- connection; the console reads the same through tenantry_console_releases.

-- name: connections
-- Every other session of this database, by application_name (which every Tenantry
-- connection sets to tenantry/<version>). backend_type is shown only to a role allowed
-- to see other users' sessions: where it is hidden, a parallel query's helper processes
-- may count once more beside their leader, under its name.
SELECT application_name AS name, count(*) AS sessions
FROM pg_stat_activity
WHERE datname = current_database() AND pid <> pg_backend_pid()
  AND coalesce(backend_type, 'client backend') = 'client backend'
GROUP BY application_name

-- name: workers
-- Live worker sessions by release: registered, and their session lock held now (ADR 0018;
-- a dead worker's row stays until a claim forgets it). A database of before the release
-- column (migration 0041) has only 0.1.0's workers.
SELECT coalesce(to_jsonb(s) ->> 'release', '0.1.0') AS release, count(*) AS workers
FROM worker_sessions s
WHERE EXISTS (SELECT 1 FROM pg_locks l
              WHERE l.locktype = 'advisory' AND l.classid = 1415008843
                AND l.objid = s.lock_key::oid AND l.objsubid = 2
                AND l.mode = 'ExclusiveLock' AND l.granted)
GROUP BY 1
