-- The console's search and the names it shows beside ids. No console-role function searches
-- across tenants yet (docs/decisions/pending-0025-search.sql proposes one), so the tenants
-- come from the operator list of migration 0011/0019, a bounded page at a time, and what
-- is inside a tenant is read in that tenant's own transaction, where row-level security
-- checks it as it does every tenant read.

-- name: tenants_after
SELECT tenant_id, name FROM tenantry_admin_tenants($1, $2)

-- name: names_in_tenant
-- The tenant's name (agent_id NULL) and the names of the given agents, in one statement.
SELECT NULL::uuid AS agent_id, t.name FROM tenants t WHERE t.tenant_id = $1
UNION ALL
SELECT a.agent_id, a.name FROM agents a WHERE a.tenant_id = $1 AND a.agent_id = ANY($2::uuid[])

-- name: find_in_tenant
-- $2 a run or task id, $3 an idempotency key (exact), $4 an agent id, $5 an agent name
-- prefix (lower case); any of them NULL when the query cannot be one.
(SELECT CASE WHEN r.kind = 'agent' THEN 'run' ELSE 'task' END AS kind, r.run_id AS id,
        NULL::text AS label, r.agent_id, a.name AS agent_name, r.status, r.created_at
 FROM runs r LEFT JOIN agents a ON a.tenant_id = r.tenant_id AND a.agent_id = r.agent_id
 WHERE r.tenant_id = $1 AND r.run_id = $2)
UNION ALL
(SELECT 'key', r.run_id, r.idempotency_key, r.agent_id, a.name, r.status, r.created_at
 FROM runs r LEFT JOIN agents a ON a.tenant_id = r.tenant_id AND a.agent_id = r.agent_id
 WHERE r.tenant_id = $1 AND r.idempotency_key = $3)
UNION ALL
(SELECT 'agent', a.agent_id, a.name, a.agent_id, a.name, NULL, a.created_at
 FROM agents a
 WHERE a.tenant_id = $1 AND (a.agent_id = $4 OR starts_with(lower(a.name), $5))
 ORDER BY a.name
 LIMIT $6)
