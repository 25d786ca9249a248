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
SELECT approval_id, key, tool, arguments, status, requested_at, expires_at, comment,
       decided_at
FROM approvals WHERE tenant_id = $1 AND run_id = $2
ORDER BY approval_id
LIMIT $3

-- name: pending_by_tenant
SELECT * FROM tenantry_console_pending_by_tenant($1, $2)

-- name: pending_approvals_of
SELECT * FROM tenantry_console_pending_approvals_of($1, $2, $3)

-- name: tool_servers_of
-- One tenant's tool servers by name, a page after $2, read in its own transaction (row-level
-- security): what the page shows of each and of its OAuth connection (never a sealed
-- column), and how many of the tenant's runs wait for that connection (migration 0044).
SELECT s.name, s.url, jsonb_array_length(s.tools) AS tools, s.created_at, s.registered_by,
       o.server_id IS NOT NULL AS oauth, o.status, o.reason, o.grant_type, o.scope,
       o.authorization_server ->> 'issuer' AS issuer,
       o.authorization_server ->> 'authorization_endpoint' AS authorization_endpoint,
       o.access_expires_at, o.connected_at,
       (SELECT count(*) FROM runs r
        WHERE r.tenant_id = s.tenant_id AND r.status = 'waiting'
          AND r.waiting_tool_server = s.server_id) AS waiting_runs
FROM tool_servers s
LEFT JOIN tool_server_oauth o ON o.tenant_id = s.tenant_id AND o.server_id = s.server_id
WHERE s.tenant_id = $1 AND ($2::text IS NULL OR s.name > $2)
ORDER BY s.name
LIMIT $3
