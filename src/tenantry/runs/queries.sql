-- name: insert_run
-- Slot 1 is taken by RunCreated in the same transaction, hence last_seq = 1. $10 is the
-- kind: 'agent' (platform workers drive it), 'task' (a library user's loop, tenantry.store)
-- or 'activity' (the activity dispatcher). $11: the agent run whose tool call enqueued
-- this activity task (ADR 0015), else NULL.
INSERT INTO runs (tenant_id, run_id, agent_id, agent_version, input, idempotency_key,
                  request_sha256, webhook_url, priority, kind, parent_run_id, last_seq)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, 1)
ON CONFLICT (tenant_id, idempotency_key) DO NOTHING
RETURNING created_at

-- name: live_version_and_model
-- The version a run without one pins (the agent's live version: publishing does not
-- change it, promoting does), and its model (an activity's or a task type's is refused as
-- an agent run).
SELECT v.version, v.spec->>'model' AS model
FROM agents a
JOIN agent_versions v
  ON v.tenant_id = a.tenant_id AND v.agent_id = a.agent_id AND v.version = a.live_version
WHERE a.tenant_id = $1 AND a.agent_id = $2

-- name: run_by_idempotency_key
-- The run, or the tombstone of the run retention deleted (its request digest is not
-- kept: NULL): a key is not reusable while its tombstone lives (ADR 0017).
SELECT run_id, request_sha256, status, false AS deleted FROM runs
WHERE tenant_id = $1 AND idempotency_key = $2
UNION ALL
SELECT run_id, NULL, status, true FROM tombstones
WHERE tenant_id = $1 AND idempotency_key_sha256 = sha256(convert_to($2, 'UTF8'))
LIMIT 1

-- name: insert_first_event
INSERT INTO run_events (tenant_id, run_id, seq, type, data, format)
VALUES ($1, $2, 1, $3, $4, $5)

-- name: append_event
-- The counter row hands out the slot under its row lock (never max(seq)+1). With an epoch,
-- only the current lease holder gets a slot; without one (cancel, approvals), any caller.
WITH slot AS (
    UPDATE runs SET last_seq = last_seq + 1, updated_at = now()
    WHERE tenant_id = $1 AND run_id = $2 AND ($3::bigint IS NULL OR lease_epoch = $3)
    RETURNING last_seq
)
INSERT INTO run_events (tenant_id, run_id, seq, type, data, format)
SELECT $1, $2, slot.last_seq, $4, $5, $6 FROM slot
RETURNING seq, created_at

-- name: get_run
SELECT run_id, agent_id, agent_version, status, input, answer, error, webhook_url, priority,
       idempotency_key, cancel_requested, input_tokens, output_tokens, cost_micros, steps,
       last_seq, created_at, updated_at, finished_at, parent_run_id, waiting_cap_micros,
       waiting_tool_server IS NOT NULL AS waiting_authorization
FROM runs WHERE tenant_id = $1 AND run_id = $2

-- name: lock_run
SELECT status, cancel_requested, lease_epoch FROM runs
WHERE tenant_id = $1 AND run_id = $2
FOR UPDATE

-- name: list_runs
SELECT run_id, agent_id, agent_version, status, input, answer, error, webhook_url, priority,
       idempotency_key, cancel_requested, input_tokens, output_tokens, cost_micros, steps,
       last_seq, created_at, updated_at, finished_at, parent_run_id, waiting_cap_micros,
       waiting_tool_server IS NOT NULL AS waiting_authorization
FROM runs
WHERE tenant_id = $1
  AND ($2::uuid IS NULL OR run_id < $2)
  AND ($3::text IS NULL OR status = $3)
ORDER BY run_id DESC
LIMIT $4

-- name: close_pending_approvals
UPDATE approvals SET status = 'cancelled', decided_at = now(), comment = 'the run was cancelled'
WHERE tenant_id = $1 AND run_id = $2 AND status = 'pending'

-- name: mark_cancel_requested
UPDATE runs SET cancel_requested = true, updated_at = now()
WHERE tenant_id = $1 AND run_id = $2

-- name: set_terminal_status
-- A run with a webhook gets its delivery queued in the same transaction (outbox), and so
-- does each of the tenant's webhook endpoints whose filters take it (ADR 0045), as
-- tenantry_commit_step_v2 queues them.
WITH ended AS (
    UPDATE runs SET status = $3, answer = $4, error = $5, finished_at = now(),
                    updated_at = now(), lease_owner = NULL, lease_expires_at = NULL,
                    webhook_state = CASE WHEN webhook_url IS NULL THEN NULL ELSE 'pending' END,
                    webhook_next_at = CASE WHEN webhook_url IS NULL THEN NULL ELSE now() END
    WHERE tenant_id = $1 AND run_id = $2
    RETURNING tenant_id, run_id, agent_id, status
)
INSERT INTO endpoint_deliveries (tenant_id, run_id, endpoint_id, next_at)
SELECT e.tenant_id, e.run_id, w.endpoint_id, now()
FROM ended e JOIN webhook_endpoints w ON w.tenant_id = e.tenant_id
WHERE (w.statuses IS NULL OR e.status = ANY (w.statuses))
  AND (w.agent_ids IS NULL OR e.agent_id = ANY (w.agent_ids))
ON CONFLICT DO NOTHING

-- name: read_events
SELECT e.seq, e.type, coalesce(p.data, e.data) AS data, e.created_at, e.format
FROM run_events e
LEFT JOIN run_event_payloads p
  ON p.tenant_id = e.tenant_id AND p.run_id = e.run_id AND p.seq = e.seq
WHERE e.tenant_id = $1 AND e.run_id = $2 AND e.seq > $3
ORDER BY e.seq
LIMIT $4

-- name: insert_payload
INSERT INTO run_event_payloads (tenant_id, run_id, seq, data) VALUES ($1, $2, $3, $4)

-- name: run_exists
SELECT 1 FROM runs WHERE tenant_id = $1 AND run_id = $2

-- name: release_lease
-- Give a run back (worker shutting down, or a retry later): any worker may claim it.
UPDATE runs SET status = 'queued', lease_owner = NULL, lease_expires_at = NULL,
                available_at = $4, updated_at = now()
WHERE tenant_id = $1 AND run_id = $2 AND lease_epoch = $3 AND status = 'running'

-- name: claim_runs
-- $4: serve in-flight runs of every tenant before new ones (the cell is overloaded).
-- taken_from, lease_was_until, owner_gone: what a re-leased run was taken from (ADR 0018).
SELECT tenant_id, run_id, lease_epoch, taken_from, lease_was_until, owner_gone
FROM tenantry_claim_runs($1, $2, $3, 'agent', $4)

-- name: register_worker
-- On the worker's own long-lived connection (ADR 0018): 'registered', 'key_taken', 'id_taken'.
-- $4: the worker's release, which `tenantry migrate --status` counts (migration 0041).
SELECT tenantry_register_worker_v2($1, $2, $3, $4)

-- name: claim_runs_fifo
SELECT tenant_id, run_id, lease_epoch FROM tenantry_claim_runs_fifo($1, $2, $3)

-- name: renew_leases
SELECT tenant_id, run_id FROM tenantry_renew_leases($1, $2, $3, $4, $5)

-- name: claim_webhooks
-- $3: the attempt limit; $4: deliveries per tenant at once; $5, $6: this worker's tenants
-- with deliveries in flight, and how many.
SELECT tenant_id, run_id, attempts FROM tenantry_claim_webhooks($1, $2, $3, $4, $5, $6)

-- name: spent_webhooks
SELECT tenant_id, run_id, attempts FROM tenantry_spent_webhooks($1, $2, $3)

-- name: webhook_job
-- previous_secret: the one a rotation replaced, while its overlap lasts (ADR 0045).
SELECT r.webhook_url, r.status, r.answer, r.error, r.agent_id, r.agent_version,
       r.input_tokens, r.output_tokens, r.cost_micros, r.steps, r.created_at, r.finished_at,
       r.last_seq, t.webhook_secret,
       CASE WHEN t.webhook_secret_previous_until > now()
            THEN t.webhook_secret_previous END AS previous_secret
FROM runs r JOIN tenants t ON t.tenant_id = r.tenant_id
WHERE r.tenant_id = $1 AND r.run_id = $2 AND r.webhook_state = 'pending'

-- name: endpoint_job
-- One delivery to an endpoint: the run's summary as its own webhook sends it, the
-- endpoint's URL, the tenant's secrets.
SELECT w.url AS webhook_url, r.status, r.answer, r.error, r.agent_id, r.agent_version,
       r.input_tokens, r.output_tokens, r.cost_micros, r.steps, r.created_at, r.finished_at,
       r.last_seq, t.webhook_secret,
       CASE WHEN t.webhook_secret_previous_until > now()
            THEN t.webhook_secret_previous END AS previous_secret
FROM endpoint_deliveries d
JOIN runs r ON r.tenant_id = d.tenant_id AND r.run_id = d.run_id
JOIN webhook_endpoints w ON w.tenant_id = d.tenant_id AND w.endpoint_id = d.endpoint_id
JOIN tenants t ON t.tenant_id = d.tenant_id
WHERE d.tenant_id = $1 AND d.run_id = $2 AND d.endpoint_id = $3 AND d.state = 'pending'

-- name: claim_endpoint_deliveries
-- As claim_webhooks, for endpoints; spent: no attempt left, to be recorded as failed.
SELECT tenant_id, run_id, endpoint_id, attempts, spent
FROM tenantry_claim_endpoint_deliveries($1, $2, $3, $4, $5, $6)

-- name: endpoint_done
UPDATE endpoint_deliveries SET state = $4, next_at = NULL
WHERE tenant_id = $1 AND run_id = $2 AND endpoint_id = $3 AND state = 'pending'

-- name: endpoint_retry_at
UPDATE endpoint_deliveries SET next_at = now() + make_interval(secs => $4)
WHERE tenant_id = $1 AND run_id = $2 AND endpoint_id = $3 AND state = 'pending'

-- name: record_attempt
-- One attempt in the tenant's delivery history ($4: the endpoint, NULL for the run's own).
INSERT INTO webhook_attempts (tenant_id, delivery_id, run_id, endpoint_id, url, attempt,
                              outcome, status_code, error)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)

-- name: webhook_done
UPDATE runs SET webhook_state = $3, webhook_next_at = NULL
WHERE tenant_id = $1 AND run_id = $2 AND webhook_state = 'pending'

-- name: webhook_retry_at
UPDATE runs SET webhook_next_at = now() + make_interval(secs => $3)
WHERE tenant_id = $1 AND run_id = $2 AND webhook_state = 'pending'

-- name: runs_to_export
-- Replay's bulk export: each run with the agent version it is pinned to.
SELECT r.run_id, r.input, v.spec
FROM runs r
JOIN agent_versions v ON v.tenant_id = r.tenant_id AND v.agent_id = r.agent_id
                     AND v.version = r.agent_version
WHERE r.tenant_id = $1 AND r.run_id = ANY($2::uuid[])

-- name: events_of_runs
-- read_events for many runs at once (their whole logs).
SELECT e.run_id, e.seq, e.type, coalesce(p.data, e.data) AS data, e.created_at, e.format
FROM run_events e
LEFT JOIN run_event_payloads p
  ON p.tenant_id = e.tenant_id AND p.run_id = e.run_id AND p.seq = e.seq
WHERE e.tenant_id = $1 AND e.run_id = ANY($2::uuid[])
ORDER BY e.run_id, e.seq

-- name: ended_runs
-- Only agent runs: an activity task is a run too, but no agent loop decided its steps, so
-- there is nothing to replay (its recorded result would read as a difference).
SELECT run_id FROM runs
WHERE tenant_id = $1 AND kind = 'agent' AND status IN ('finished', 'failed', 'cancelled')
  AND ($2::uuid IS NULL OR run_id > $2)
ORDER BY run_id
LIMIT $3

-- name: park_run
-- Give the slot back while the run waits for something outside (an approval). A cancel that
-- arrived meanwhile sends it back to the queue instead, where the next worker ends it.
UPDATE runs SET status = CASE WHEN cancel_requested THEN 'queued' ELSE 'waiting' END,
                lease_owner = NULL, lease_expires_at = NULL, updated_at = now()
WHERE tenant_id = $1 AND run_id = $2 AND lease_epoch = $3 AND status = 'running'

-- name: park_for_model
-- No account can serve the run's models now: it waits, slot released, until a probe of an
-- account serving one of them succeeds (or until $5 at the latest). A cancel that arrived
-- meanwhile sends it back to the queue instead, where the next worker ends it.
UPDATE runs SET status = CASE WHEN cancel_requested THEN 'queued' ELSE 'waiting' END,
                parked_on = CASE WHEN cancel_requested THEN NULL ELSE $4::text[] END,
                available_at = CASE WHEN cancel_requested THEN NULL ELSE $5::timestamptz END,
                lease_owner = NULL, lease_expires_at = NULL, updated_at = now()
WHERE tenant_id = $1 AND run_id = $2 AND lease_epoch = $3 AND status = 'running'

-- name: park_for_authorization
-- The call needs its tool server ($4) connected again: the run waits, slot released, the
-- call not made, until the connection's change to 'connected' wakes it (routine
-- wake_authorized). The caller checked, under this row's lock and the connection's, that
-- no cancel is pending and the connection is not connected.
UPDATE runs SET status = 'waiting', waiting_tool_server = $4, available_at = NULL,
                lease_owner = NULL, lease_expires_at = NULL, updated_at = now()
WHERE tenant_id = $1 AND run_id = $2 AND lease_epoch = $3 AND status = 'running'

-- name: park_for_spend_cap
-- The tenant's monthly spend cap ($4, as the refused reservation found it) is reached: the
-- run waits, slot released, until the cap changes or the month it was refused in ends ($5);
-- tenantry_wake_spend_capped (migration 0040) wakes it. The caller checked, under this
-- row's lock, that no cancel is pending.
UPDATE runs SET status = 'waiting', waiting_cap_micros = $4, available_at = $5,
                lease_owner = NULL, lease_expires_at = NULL, updated_at = now()
WHERE tenant_id = $1 AND run_id = $2 AND lease_epoch = $3 AND status = 'running'

-- name: create_runs
-- A batch of new agent runs from the API's intake (runs/intake.py, migration 0027): one
-- row per item, (i, outcome, run_id, status, detail).
SELECT i, outcome, run_id, status, detail FROM tenantry_create_runs($1::jsonb)

-- name: commit_step
-- A step's events, projections, lease, audit row, settlement, usage fact and terminal
-- status in one call (migration 0029): NULL last_seq when the lease is no longer ours;
-- hand_back when the run went back to the queue because its tenant is moving (0031). v2
-- queues the tenant's endpoint deliveries with a run's end (ADR 0045).
SELECT last_seq, cancel_requested, hand_back
FROM tenantry_commit_step_v2($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14,
                             $15, $16)

-- name: run_events
SELECT seq, type, data, created_at, format FROM tenantry_run_events($1, $2, $3, $4)

-- name: run_for_worker
-- plan: the tenant's class, the only tenant label the worker's metrics carry.
-- snapshot_pins: the agent's held provider snapshots, with the owners of the accounts that
-- reported each (migrations 0037, 0039).
SELECT agent_id, agent_version, input, status, lease_epoch, region, plan, created_at,
       started_at, spec, tool_pins, snapshot_pins
FROM tenantry_run_for_worker($1, $2)

-- name: has_live_children
-- A child run of this run (runs/child_step.py) that has not ended.
SELECT EXISTS (SELECT 1 FROM runs WHERE tenant_id = $1 AND parent_run_id = $2
                                    AND kind = 'agent'
                                    AND status NOT IN ('finished', 'failed', 'cancelled'))

-- name: wake_to_cancel
-- A waiting parent asked to cancel: back to the queue, so a worker cancels its children
-- and then the run (the cascade survives a crash that way).
UPDATE runs SET status = 'queued', updated_at = now()
WHERE tenant_id = $1 AND run_id = $2 AND status = 'waiting'

-- name: list_children
SELECT run_id, agent_id, agent_version, status, input, answer, error, webhook_url, priority,
       idempotency_key, cancel_requested, input_tokens, output_tokens, cost_micros, steps,
       last_seq, created_at, updated_at, finished_at, parent_run_id, waiting_cap_micros,
       waiting_tool_server IS NOT NULL AS waiting_authorization
FROM runs
WHERE tenant_id = $1 AND parent_run_id = $2 AND kind = 'agent'
  AND ($3::uuid IS NULL OR run_id > $3)
ORDER BY run_id
LIMIT $4
