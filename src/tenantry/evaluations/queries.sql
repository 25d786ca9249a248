-- name: insert_test_set
INSERT INTO agent_test_sets (tenant_id, test_set_id, agent_id, name, tool_results, stubs, cases,
                             case_count)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
ON CONFLICT (tenant_id, agent_id, name) DO NOTHING
RETURNING created_at

-- name: insert_case_source
-- What a case copied from its run, kept by the run's id: deleted with the run (0038).
INSERT INTO test_case_sources (tenant_id, test_set_id, case_index, run_id, input, recorded)
VALUES ($1, $2, $3, $4, $5, $6)

-- name: case_sources
SELECT case_index, run_id, input, recorded
FROM test_case_sources
WHERE tenant_id = $1 AND test_set_id = $2

-- name: get_test_set
SELECT test_set_id, agent_id, name, tool_results, stubs, cases, created_at
FROM agent_test_sets
WHERE tenant_id = $1 AND agent_id = $2 AND test_set_id = $3

-- name: list_test_sets
-- Summaries: no case is read (a row the previous release wrote has no count yet).
SELECT test_set_id, agent_id, name, tool_results,
       coalesce(case_count, jsonb_array_length(cases)) AS cases, created_at
FROM agent_test_sets
WHERE tenant_id = $1 AND agent_id = $2 AND ($3::uuid IS NULL OR test_set_id < $3)
ORDER BY test_set_id DESC
LIMIT $4

-- name: agent_exists
SELECT latest_version, live_version FROM agents WHERE tenant_id = $1 AND agent_id = $2

-- name: run_to_record
-- A run of the agent a case is made from, locked against its deletion until the copy of
-- its input and calls is stored (the retention batch skips a locked run; one it holds
-- is found gone here once it commits).
SELECT r.input, r.status FROM runs r
WHERE r.tenant_id = $1 AND r.run_id = $2 AND r.agent_id = $3
FOR KEY SHARE

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
-- Each run of an evaluation with what it did (a run retention deleted has no row: null),
-- and its verdicts once stored (the first report after it ended).
SELECT x.case_index, x.side, x.run_id, r.status, r.answer, r.error, r.steps,
       r.input_tokens, r.output_tokens, r.cost_micros,
       extract(epoch FROM (r.finished_at - coalesce(r.started_at, r.created_at))) * 1000
           AS latency_ms,
       v.verdicts, v.tool_calls, v.tool_calls_total, v.tool_calls_sha256
FROM evaluation_runs x
LEFT JOIN runs r ON r.tenant_id = x.tenant_id AND r.run_id = x.run_id
LEFT JOIN evaluation_results v ON v.tenant_id = x.tenant_id AND v.run_id = x.run_id
WHERE x.tenant_id = $1 AND x.evaluation_id = $2
ORDER BY x.case_index, x.side

-- name: report_cases
-- What a report shows of each case: its name, its input (its own, else the copy of its
-- run's while that run lives) and its checks — never its recordings.
SELECT (c.n - 1)::integer AS case_index, c.value->>'name' AS name,
       coalesce(c.value->'input', s.input) AS input, c.value->'checks' AS checks
FROM agent_test_sets t
CROSS JOIN LATERAL jsonb_array_elements(t.cases) WITH ORDINALITY AS c (value, n)
LEFT JOIN test_case_sources s
  ON s.tenant_id = t.tenant_id AND s.test_set_id = t.test_set_id AND s.case_index = c.n - 1
WHERE t.tenant_id = $1 AND t.test_set_id = $2
ORDER BY c.n

-- name: calls_to_judge
-- The tool calls of runs that ended, as the checks read them: the tool, its arguments and
-- what answered it (never its result). Read once per run, by the first report after its end.
SELECT e.run_id, d.data->>'tool' AS tool, d.data->'arguments' AS arguments,
       d.data->>'outcome' AS outcome
FROM run_events e
LEFT JOIN run_event_payloads p
  ON p.tenant_id = e.tenant_id AND p.run_id = e.run_id AND p.seq = e.seq
CROSS JOIN LATERAL (SELECT coalesce(p.data, e.data) AS data) d
WHERE e.tenant_id = $1 AND e.run_id = ANY($2::uuid[]) AND e.type = 'ToolCompleted'
ORDER BY e.run_id, e.seq

-- name: store_result
-- A side's verdicts, stored once while its run is there: the run's row is locked against
-- the retention batch, which deletes results with their run (one stored after that
-- would outlive it). A concurrent first read stored the same: nothing to add.
INSERT INTO evaluation_results (tenant_id, run_id, evaluation_id, status, passed, verdicts,
                                tool_calls, tool_calls_total, tool_calls_sha256)
SELECT r.tenant_id, r.run_id, $3, $4, $5, $6, $7, $8, $9
FROM runs r
WHERE r.tenant_id = $1 AND r.run_id = $2
FOR KEY SHARE
ON CONFLICT (tenant_id, run_id) DO NOTHING
