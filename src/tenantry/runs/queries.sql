-- name: insert_run
-- Slot 1 is taken by RunCreated in the same transaction, hence last_seq = 1.
INSERT INTO runs (tenant_id, run_id, agent_id, agent_version, input, idempotency_key,
                  request_sha256, webhook_url, priority, last_seq)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, 1)
ON CONFLICT (tenant_id, idempotency_key) DO NOTHING
RETURNING created_at

-- name: run_by_idempotency_key
SELECT run_id, request_sha256, status FROM runs
WHERE tenant_id = $1 AND idempotency_key = $2

-- name: insert_first_event
INSERT INTO run_events (tenant_id, run_id, seq, type, data) VALUES ($1, $2, 1, $3, $4)

-- name: append_event
-- The counter row hands out the slot under its row lock (never max(seq)+1). With an epoch,
-- only the current lease holder gets a slot; without one (cancel, approvals), any caller.
WITH slot AS (
    UPDATE runs SET last_seq = last_seq + 1, updated_at = now()
    WHERE tenant_id = $1 AND run_id = $2 AND ($3::bigint IS NULL OR lease_epoch = $3)
    RETURNING last_seq
)
INSERT INTO run_events (tenant_id, run_id, seq, type, data)
SELECT $1, $2, slot.last_seq, $4, $5 FROM slot
RETURNING seq, created_at

-- name: get_run
SELECT run_id, agent_id, agent_version, status, input, answer, error, webhook_url, priority,
       idempotency_key, cancel_requested, input_tokens, output_tokens, cost_micros, steps,
       last_seq, created_at, updated_at, finished_at
FROM runs WHERE tenant_id = $1 AND run_id = $2

-- name: lock_run
SELECT status, cancel_requested, lease_epoch FROM runs
WHERE tenant_id = $1 AND run_id = $2
FOR UPDATE

-- name: list_runs
SELECT run_id, agent_id, agent_version, status, input, answer, error, webhook_url, priority,
       idempotency_key, cancel_requested, input_tokens, output_tokens, cost_micros, steps,
       last_seq, created_at, updated_at, finished_at
FROM runs
WHERE tenant_id = $1
  AND ($2::uuid IS NULL OR run_id < $2)
  AND ($3::text IS NULL OR status = $3)
ORDER BY run_id DESC
LIMIT $4

-- name: mark_cancel_requested
UPDATE runs SET cancel_requested = true, updated_at = now()
WHERE tenant_id = $1 AND run_id = $2

-- name: set_terminal_status
UPDATE runs SET status = $3, answer = $4, error = $5, finished_at = now(), updated_at = now(),
                lease_owner = NULL, lease_expires_at = NULL
WHERE tenant_id = $1 AND run_id = $2

-- name: read_events
SELECT seq, type, data, created_at FROM run_events
WHERE tenant_id = $1 AND run_id = $2 AND seq > $3
ORDER BY seq
LIMIT $4

-- name: run_exists
SELECT 1 FROM runs WHERE tenant_id = $1 AND run_id = $2
