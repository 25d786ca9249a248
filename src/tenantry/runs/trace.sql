-- name: trace_run
-- The run row's part of a trace; clock_timestamp() is "now" for a run still going.
SELECT status, agent_id, agent_version, created_at, started_at, finished_at,
       clock_timestamp() AS now
FROM runs WHERE tenant_id = $1 AND run_id = $2
