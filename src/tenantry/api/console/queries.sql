-- The console's reads. Cross-tenant pages go through the definer functions of migration
-- 0009 (bounded pages, only the columns shown); one run's details go through the tenant's
-- own transaction, so row-level security checks them as it does every tenant read.

-- name: runs_page
SELECT * FROM tenantry_console_runs($1, $2, $3, $4, $5)

-- name: tenants_page
SELECT * FROM tenantry_console_tenants($1, $2)

-- name: flagged_versions
SELECT * FROM tenantry_console_flagged_versions($1::text[])

-- name: retention
SELECT * FROM tenantry_console_retention($1::text[])

-- name: spend_capped
-- Per listed tenant: its runs waiting for its monthly spend cap (migration 0040).
SELECT * FROM tenantry_console_spend_capped($1::text[])

-- name: queue_depth
SELECT tenantry_queue_depth()

-- name: run_approvals
SELECT approval_id, key, tool, arguments, status, requested_at, expires_at
FROM approvals WHERE tenant_id = $1 AND run_id = $2
ORDER BY approval_id
LIMIT $3

-- name: pending_by_tenant
SELECT * FROM tenantry_console_pending_by_tenant($1, $2)

-- name: pending_approvals_of
SELECT * FROM tenantry_console_pending_approvals_of($1, $2, $3)
