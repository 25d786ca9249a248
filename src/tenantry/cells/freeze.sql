-- A cell's side of moving a tenant (migration 0031, ADR 0029). Run by the operator's
-- `tenantry cells move` on the cell's owner login (it sees every tenant; RLS is not in the
-- way), never by the API or workers.

-- name: freeze
INSERT INTO frozen_tenants (tenant_id, state, move_id) VALUES ($1, $2, $3)
ON CONFLICT (tenant_id) DO UPDATE SET state = excluded.state, since = now()
WHERE frozen_tenants.move_id = excluded.move_id
RETURNING since

-- name: frozen_state
SELECT state, move_id FROM frozen_tenants WHERE tenant_id = $1

-- name: unfreeze
DELETE FROM frozen_tenants WHERE tenant_id = $1 AND move_id = $2

-- name: older_transactions
-- Transactions that began before the freeze committed: a claim or an intake among them
-- may not have seen it. The move waits for them to end before it counts leased runs.
-- Client backends only: an autovacuum worker's long transaction claims nothing.
SELECT count(*) FROM pg_stat_activity
WHERE datname = current_database() AND pid <> pg_backend_pid()
  AND backend_type = 'client backend'
  AND xact_start IS NOT NULL AND xact_start < $1

-- name: void_stale_leases
-- A leased run whose lease lapsed or whose worker died would otherwise wait for a claim
-- that skips a frozen tenant: queued again under a new epoch, as a claim would have done.
UPDATE runs SET status = 'queued', lease_owner = NULL, lease_expires_at = NULL,
                lease_epoch = lease_epoch + 1, updated_at = now()
WHERE tenant_id = $1 AND status = 'running'
  AND (lease_expires_at < now() OR lease_owner = ANY (tenantry_dead_workers()))

-- name: still_held
-- What keeps the tenant's rows moving: runs under a lease, and a retention pass.
SELECT (SELECT count(*) FROM runs WHERE tenant_id = $1 AND status = 'running') AS leased,
       (SELECT count(*) FROM cleanup_leases
        WHERE tenant_id = $1 AND owner IS NOT NULL AND expires_at >= now()) AS cleaning

-- name: schema_version
SELECT coalesce(max(version), 0) AS version,
       coalesce(string_agg(sha256, ',' ORDER BY version), '') AS shas
FROM schema_migrations

-- name: tenant_tables
-- Every table holding a tenant's rows: a tenant_id column, a plain or partitioned table
-- (never one partition: its parent covers it), frozen_tenants aside (the move's own).
-- Columns in table order, less identity and generated ones (the cell numbers its own).
SELECT c.relname AS name,
       array_agg(a.attname::text ORDER BY a.attnum)
           FILTER (WHERE a.attidentity = '' AND a.attgenerated = '') AS columns
FROM pg_class c
JOIN pg_namespace n ON n.oid = c.relnamespace AND n.nspname = 'public'
JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
WHERE c.relkind IN ('r', 'p') AND NOT c.relispartition
  AND c.relname <> 'frozen_tenants'
  AND EXISTS (SELECT 1 FROM pg_attribute t
              WHERE t.attrelid = c.oid AND t.attname = 'tenant_id' AND NOT t.attisdropped)
GROUP BY c.relname
ORDER BY c.relname

-- name: capacity_shares_of_tenant
-- A tenant's own model accounts' capacity shares: keyed by account, not tenant.
DELETE FROM model_capacity_shares
WHERE account_id IN (SELECT account_id FROM model_accounts WHERE tenant_id = $1)

-- name: set_home_cell
UPDATE tenants SET home_cell = $2 WHERE tenant_id = $1
