-- A tenant's exports (migration 0051, ADR 0044). Every query runs in the tenant's
-- transaction (Database.tenant_tx): row-level security checks the tenant again.

-- name: lock
-- Serializes a tenant's requests (to the commit): a second request's count, in a statement
-- after this one, sees the first one's row.
SELECT pg_advisory_xact_lock(hashtextextended('tenantry.exports:' || $1, 0))

-- name: create
-- At most $5 unfinished exports per tenant. No row: over the limit, or the key is taken.
INSERT INTO exports (tenant_id, export_id, idempotency_key, requested_by)
SELECT $1, $2, $3, $4
WHERE (SELECT count(*) FROM exports
       WHERE tenant_id = $1 AND status IN ('queued', 'running')) < $5
ON CONFLICT (tenant_id, idempotency_key) DO NOTHING
RETURNING export_id

-- name: by_key
SELECT export_id FROM exports WHERE tenant_id = $1 AND idempotency_key = $2

-- name: get
SELECT export_id, status, requested_by, attempts, bytes, counts, error, created_at,
       started_at, finished_at, expires_at, archive_ref
FROM exports WHERE tenant_id = $1 AND export_id = $2

-- name: page
-- Newest first; $2 the cursor (the last export id of the previous page; ids are UUIDv7,
-- so their order is creation order).
SELECT export_id, status, requested_by, attempts, bytes, counts, error, created_at,
       started_at, finished_at, expires_at, archive_ref
FROM exports
WHERE tenant_id = $1 AND ($2::uuid IS NULL OR export_id < $2)
ORDER BY export_id DESC
LIMIT $3

-- name: claim
SELECT tenant_id, export_id, epoch, archive_ref FROM tenantry_claim_export($1, $2, $3, $4)

-- name: renew
-- Fenced: only the owner of this epoch, while its lease holds.
UPDATE exports SET lease_expires_at = clock_timestamp() + make_interval(secs => $5)
WHERE tenant_id = $1 AND export_id = $2 AND lease_owner = $3 AND lease_epoch = $4
  AND status = 'running' AND lease_expires_at > clock_timestamp()
RETURNING export_id

-- name: finish
-- Fenced like renew: a stale owner's archive never becomes the export's.
UPDATE exports SET status = 'ready', bytes = $5, counts = $6, error = NULL,
                   finished_at = clock_timestamp(), lease_owner = NULL,
                   lease_expires_at = NULL,
                   expires_at = clock_timestamp() + make_interval(days => $7)
WHERE tenant_id = $1 AND export_id = $2 AND lease_owner = $3 AND lease_epoch = $4
  AND status = 'running' AND lease_expires_at > clock_timestamp()
RETURNING export_id

-- name: attempt_failed
-- The attempt's error kept; the export is claimed again after $6 seconds (or failed by
-- the claim once it has had its attempts).
UPDATE exports SET error = left($5, 500),
                   lease_expires_at = clock_timestamp() + make_interval(secs => $6)
WHERE tenant_id = $1 AND export_id = $2 AND lease_owner = $3 AND lease_epoch = $4
  AND status = 'running'
RETURNING export_id

-- name: runs
-- A page of the tenant's runs in id (creation) order, after $2.
SELECT run_id, kind, agent_id, agent_version, status, input, answer, error, priority,
       parent_run_id, idempotency_key, webhook_url, webhook_state, input_tokens,
       output_tokens, cost_micros, steps, last_seq, created_at, started_at, updated_at,
       finished_at
FROM runs WHERE tenant_id = $1 AND run_id > $2
ORDER BY run_id LIMIT $3

-- name: run_blobs
SELECT ref, kind, bytes, created_at FROM blobs
WHERE tenant_id = $1 AND run_id = $2
ORDER BY created_at, ref

-- name: tombstones
SELECT run_id, kind, agent_id, agent_version, parent_run_id, status, created_at,
       started_at, ended_at, steps, events, input_tokens, output_tokens, cost_micros,
       reason, deleted_at
FROM tombstones WHERE tenant_id = $1 AND run_id > $2
ORDER BY run_id LIMIT $3

-- name: agents
SELECT agent_id, name, latest_version, live_version, created_at
FROM agents WHERE tenant_id = $1 AND agent_id > $2
ORDER BY agent_id LIMIT $3

-- name: agent_versions
SELECT agent_id, version, spec, tool_pins, encode(spec_sha256, 'hex') AS spec_sha256,
       created_at
FROM agent_versions WHERE tenant_id = $1 AND (agent_id, version) > ($2, $3)
ORDER BY agent_id, version LIMIT $4

-- name: test_sets
SELECT test_set_id, agent_id, name, tool_results, stubs, cases, case_count, created_at
FROM agent_test_sets WHERE tenant_id = $1 AND test_set_id > $2
ORDER BY test_set_id LIMIT $3

-- name: evaluations
-- With its runs (case, side, run) and their stored verdicts.
SELECT e.evaluation_id, e.agent_id, e.test_set_id, e.baseline_version,
       e.candidate_version, e.candidate_model, e.cases, e.created_by, e.created_at,
       coalesce((SELECT jsonb_agg(jsonb_build_object(
                    'case_index', r.case_index, 'side', r.side,
                    'run_id', 'run_' || replace(r.run_id::text, '-', ''),
                    'result', (SELECT jsonb_build_object(
                                  'status', x.status, 'passed', x.passed,
                                  'verdicts', x.verdicts, 'tool_calls', x.tool_calls,
                                  'tool_calls_total', x.tool_calls_total,
                                  'computed_at', x.computed_at)
                               FROM evaluation_results x
                               WHERE x.tenant_id = r.tenant_id AND x.run_id = r.run_id
                                 AND x.evaluation_id = r.evaluation_id))
                  ORDER BY r.case_index, r.side)
                 FROM evaluation_runs r
                 WHERE r.tenant_id = e.tenant_id AND r.evaluation_id = e.evaluation_id),
                '[]'::jsonb) AS runs
FROM agent_evaluations e WHERE e.tenant_id = $1 AND e.evaluation_id > $2
ORDER BY e.evaluation_id LIMIT $3

-- name: usage_facts
-- The billing record: model calls' facts, in (run, seq) order after ($2, $3).
SELECT run_id, seq, agent_id, agent_version, provider, account, model, input_tokens,
       cached_input_tokens, cache_write_input_tokens, output_tokens, cost_micros,
       price_version, created_at
FROM usage_facts WHERE tenant_id = $1 AND (run_id, seq) > ($2, $3)
ORDER BY run_id, seq LIMIT $4

-- name: sandbox_usage_facts
SELECT run_id, seq, agent_id, agent_version, backend, sandbox_ms, cost_micros,
       price_version, attempt, activity, activity_version, cpu_us, peak_memory_bytes,
       created_at
FROM sandbox_usage_facts WHERE tenant_id = $1 AND (run_id, seq) > ($2, $3)
ORDER BY run_id, seq LIMIT $4
