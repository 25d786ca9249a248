-- name: insert_test_set
INSERT INTO agent_test_sets (tenant_id, test_set_id, agent_id, name, tool_results, stubs, cases)
VALUES ($1, $2, $3, $4, $5, $6, $7)
ON CONFLICT (tenant_id, agent_id, name) DO NOTHING
RETURNING created_at

-- name: get_test_set
SELECT test_set_id, agent_id, name, tool_results, stubs, cases, created_at
FROM agent_test_sets
WHERE tenant_id = $1 AND agent_id = $2 AND test_set_id = $3

-- name: list_test_sets
SELECT test_set_id, agent_id, name, tool_results, stubs, cases, created_at
FROM agent_test_sets
WHERE tenant_id = $1 AND agent_id = $2 AND ($3::uuid IS NULL OR test_set_id < $3)
ORDER BY test_set_id DESC
LIMIT $4

-- name: agent_exists
SELECT latest_version, live_version FROM agents WHERE tenant_id = $1 AND agent_id = $2

-- name: run_to_record
-- A finished run of the agent a case is made from: its input, and every call it made.
SELECT r.input, r.status FROM runs r
WHERE r.tenant_id = $1 AND r.run_id = $2 AND r.agent_id = $3

-- name: tool_calls_of_runs
-- The tool calls of runs, as their ToolCompleted events record them (large payloads
-- are kept apart: read through).
SELECT e.run_id, coalesce(p.data, e.data) AS data
FROM run_events e
LEFT JOIN run_event_payloads p
  ON p.tenant_id = e.tenant_id AND p.run_id = e.run_id AND p.seq = e.seq
WHERE e.tenant_id = $1 AND e.run_id = ANY($2::uuid[]) AND e.type = 'ToolCompleted'
ORDER BY e.run_id, e.seq

-- name: insert_evaluation
INSERT INTO agent_evaluations (tenant_id, evaluation_id, agent_id, test_set_id,
                               baseline_version, candidate_version, candidate_model, cases,
                               created_by)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
RETURNING created_at

-- name: insert_evaluation_run
INSERT INTO evaluation_runs (tenant_id, evaluation_id, case_index, side, run_id)
VALUES ($1, $2, $3, $4, $5)

-- name: get_evaluation
SELECT evaluation_id, agent_id, test_set_id, baseline_version, candidate_version,
       candidate_model, cases, created_by, created_at
FROM agent_evaluations
WHERE tenant_id = $1 AND agent_id = $2 AND evaluation_id = $3

-- name: get_evaluation_of_tenant
-- An evaluation by its id alone (the operator console's page links it from a run, which
-- knows its evaluation but not through which agent).
SELECT evaluation_id, agent_id, test_set_id, baseline_version, candidate_version,
       candidate_model, cases, created_by, created_at
FROM agent_evaluations
WHERE tenant_id = $1 AND evaluation_id = $2

-- name: list_evaluations
SELECT evaluation_id, agent_id, test_set_id, baseline_version, candidate_version,
       candidate_model, cases, created_by, created_at
FROM agent_evaluations
WHERE tenant_id = $1 AND agent_id = $2 AND ($3::uuid IS NULL OR evaluation_id < $3)
ORDER BY evaluation_id DESC
LIMIT $4

-- name: evaluation_runs
-- Each run of an evaluation with what it did (a run retention deleted has no row: null).
SELECT x.case_index, x.side, x.run_id, r.status, r.answer, r.error, r.steps,
       r.input_tokens, r.output_tokens, r.cost_micros,
       extract(epoch FROM (r.finished_at - coalesce(r.started_at, r.created_at))) * 1000
           AS latency_ms
FROM evaluation_runs x
LEFT JOIN runs r ON r.tenant_id = x.tenant_id AND r.run_id = x.run_id
WHERE x.tenant_id = $1 AND x.evaluation_id = $2
ORDER BY x.case_index, x.side
