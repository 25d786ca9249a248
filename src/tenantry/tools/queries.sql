-- name: insert_server
INSERT INTO tool_servers (tenant_id, server_id, name, url, honours_idempotency_keys, tools,
                          tools_sha256, secret_ref, call_timeout_seconds, registered_by,
                          speaks_modern)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)
ON CONFLICT (tenant_id, name) DO NOTHING
RETURNING created_at

-- name: list_servers
SELECT server_id, name, url, honours_idempotency_keys, tools, tools_sha256, secret_ref,
       created_at, call_timeout_seconds, registered_by, speaks_modern, EXISTS (SELECT 1 FROM tool_server_oauth o WHERE o.tenant_id = s.tenant_id
                           AND o.server_id = s.server_id) AS oauth
FROM tool_servers s WHERE tenant_id = $1
ORDER BY name

-- name: get_server
SELECT server_id, name, url, honours_idempotency_keys, tools, tools_sha256, secret_ref,
       created_at, call_timeout_seconds, registered_by, speaks_modern, EXISTS (SELECT 1 FROM tool_server_oauth o WHERE o.tenant_id = s.tenant_id
                           AND o.server_id = s.server_id) AS oauth
FROM tool_servers s WHERE tenant_id = $1 AND name = $2

-- name: repin_server
UPDATE tool_servers SET tools = $3, tools_sha256 = $4,
                        speaks_modern = coalesce($5, speaks_modern)
WHERE tenant_id = $1 AND name = $2

-- name: remove_server
-- The server goes, with its OAuth connection (ON DELETE CASCADE); runs waiting for that
-- connection go back to the queue, where their call finds no server and the model is told
-- (they would otherwise wait for a connection that can no longer come).
WITH gone AS (
    DELETE FROM tool_servers WHERE tenant_id = $1 AND name = $2 RETURNING server_id
), woken AS (
    UPDATE runs r SET status = 'queued', waiting_tool_server = NULL, updated_at = now()
    FROM gone
    WHERE r.tenant_id = $1 AND r.waiting_tool_server = gone.server_id AND r.status = 'waiting'
)
SELECT server_id FROM gone

-- name: servers_sending_secret
SELECT name FROM tool_servers WHERE tenant_id = $1 AND secret_ref = $2 ORDER BY name

-- name: tenant_exists
SELECT 1 FROM tenants WHERE tenant_id = $1

-- name: servers_page
SELECT server_id, name, url, honours_idempotency_keys, tools, tools_sha256, secret_ref,
       created_at, call_timeout_seconds, registered_by, speaks_modern, EXISTS (SELECT 1 FROM tool_server_oauth o WHERE o.tenant_id = s.tenant_id
                           AND o.server_id = s.server_id) AS oauth
FROM tool_servers s WHERE tenant_id = $1 AND ($2::text IS NULL OR name > $2)
ORDER BY name
LIMIT $3

-- name: evaluation_stand_in
-- What answers the tool calls of an evaluation's run: its case's recordings (the tenant's
-- own first, then what the case copied from its run, while that run lives: 0038) and the
-- test set's stubs (ADR 0034).
SELECT t.tool_results, t.stubs,
       coalesce(t.cases -> r.case_index -> 'recorded', '[]') || coalesce(s.recorded, '[]')
           AS recorded
FROM evaluation_runs r
JOIN agent_evaluations e ON e.tenant_id = r.tenant_id AND e.evaluation_id = r.evaluation_id
JOIN agent_test_sets t ON t.tenant_id = e.tenant_id AND t.test_set_id = e.test_set_id
LEFT JOIN test_case_sources s
  ON s.tenant_id = t.tenant_id AND s.test_set_id = t.test_set_id
 AND s.case_index = r.case_index
WHERE r.tenant_id = $1 AND r.run_id = $2
