-- The library store (tenantry.store). Every statement is scoped by tenant_id first and runs
-- in a tenant transaction (row-level security checks it again), except the claim, which is
-- the cross-tenant SECURITY DEFINER function of the fair scheduler.

-- name: task_type
-- Does the tenant exist, and what is the task type called $2 at version $3? Read-only: task
-- types are written through tenantry.agents.service (this lookup by name is the one thing
-- that service does not offer).
SELECT EXISTS (SELECT 1 FROM tenants t WHERE t.tenant_id = $1) AS tenant_exists,
       a.agent_id, a.latest_version,
       (SELECT v.spec->>'model' FROM agent_versions v
        WHERE v.tenant_id = a.tenant_id AND v.agent_id = a.agent_id
          AND v.version = $3) AS version_model,
       (SELECT v.spec->>'model' FROM agent_versions v
        WHERE v.tenant_id = a.tenant_id AND v.agent_id = a.agent_id
          AND v.version = a.latest_version) AS latest_model
FROM (SELECT 1) AS one
LEFT JOIN agents a ON a.tenant_id = $1 AND a.name = $2

-- name: claim_tasks
-- The fair claim (migration 0007), restricted to library tasks: platform workers claim
-- 'agent' runs through the same function and never see these.
SELECT tenant_id, run_id, lease_epoch FROM tenantry_claim_runs($1, $2, $3, 'task')

-- name: leased_tasks
SELECT r.run_id, a.name, r.agent_version, r.input
FROM runs r
JOIN agents a ON a.tenant_id = r.tenant_id AND a.agent_id = r.agent_id
WHERE r.tenant_id = $1 AND r.run_id = ANY($2::uuid[]) AND r.kind = 'task'

-- name: get_task
SELECT r.run_id, a.name, r.agent_version, r.status, r.input, r.answer, r.error, r.priority,
       r.idempotency_key, r.cancel_requested, r.lease_epoch, r.last_seq, r.created_at,
       r.updated_at, r.started_at, r.finished_at
FROM runs r
JOIN agents a ON a.tenant_id = r.tenant_id AND a.agent_id = r.agent_id
WHERE r.tenant_id = $1 AND r.run_id = $2 AND r.kind = 'task'

-- name: task_exists
SELECT 1 FROM runs WHERE tenant_id = $1 AND run_id = $2 AND kind = 'task'

-- name: lock_task
-- A tenant's own write (a signal): the task must be this tenant's and a task.
SELECT status FROM runs
WHERE tenant_id = $1 AND run_id = $2 AND kind = 'task'
FOR UPDATE

-- name: lock_leased_task
-- The fence for every write under a lease: the row is locked only if the caller's epoch is
-- still the task's and it is still running, before anything is written.
SELECT cancel_requested FROM runs
WHERE tenant_id = $1 AND run_id = $2 AND kind = 'task' AND lease_epoch = $3
  AND status = 'running'
FOR UPDATE

-- name: end_task
UPDATE runs SET status = $4, answer = $5, error = $6, finished_at = now(), updated_at = now(),
                lease_owner = NULL, lease_expires_at = NULL
WHERE tenant_id = $1 AND run_id = $2 AND kind = 'task' AND lease_epoch = $3
  AND status = 'running'

-- name: park_task
-- The lease holder gives the slot back until a signal arrives.
UPDATE runs SET status = 'waiting', lease_owner = NULL, lease_expires_at = NULL,
                updated_at = now()
WHERE tenant_id = $1 AND run_id = $2 AND kind = 'task' AND lease_epoch = $3
  AND status = 'running'

-- name: wake_task
-- A signal sends a waiting task back to the queue, in the signal's transaction.
UPDATE runs SET status = 'queued', available_at = NULL, updated_at = now()
WHERE tenant_id = $1 AND run_id = $2 AND kind = 'task' AND status = 'waiting'

-- name: pending_signals
-- Signals after the last one consumed ($3: Signalled, $4: SignalConsumed). Consumption goes
-- in signal order, so the highest consumed seq is the watermark.
SELECT e.seq, coalesce(p.data, e.data) AS data, e.created_at
FROM run_events e
LEFT JOIN run_event_payloads p
  ON p.tenant_id = e.tenant_id AND p.run_id = e.run_id AND p.seq = e.seq
WHERE e.tenant_id = $1 AND e.run_id = $2 AND e.type = $3
  AND e.seq > (SELECT coalesce(max((c.data->>'signal_seq')::integer), 0)
               FROM run_events c
               WHERE c.tenant_id = $1 AND c.run_id = $2 AND c.type = $4)
ORDER BY e.seq
LIMIT $5

-- Activity tasks (ADR 0013): runs of kind 'activity', driven by the dispatcher. Attempts
-- are ActivityAttempted events; a requeue of a dead letter is RunResumed{after:
-- 'dead_letter'}, and attempts and sandbox deaths are counted after the last one.

-- name: claim_activities
-- The fair claim with each tenant's max_activity_slots (migration 0020).
SELECT tenant_id, run_id, lease_epoch FROM tenantry_claim_activities($1, $2, $3)

-- name: activity_task
-- $3: ActivityAttempted, $4: RunResumed, $5: ActivityStarted. One row per task: what the
-- dispatcher needs to build the next attempt and to decide after it. started /
-- started_sandbox: the last attempt that got its sandbox; past `attempts`, it was abandoned.
-- egress_refused: egress attempts refused over all its attempts; plan: the tenant's class
-- (the only tenant label of the dispatcher's metrics).
WITH attempts AS (
    SELECT e.seq, coalesce(p.data, e.data) AS data
    FROM run_events e
    LEFT JOIN run_event_payloads p
      ON p.tenant_id = e.tenant_id AND p.run_id = e.run_id AND p.seq = e.seq
    WHERE e.tenant_id = $1 AND e.run_id = $2 AND e.type = $3
), requeued AS (
    SELECT coalesce(max(e.seq), 0) AS seq FROM run_events e
    WHERE e.tenant_id = $1 AND e.run_id = $2 AND e.type = $4
      AND e.data->>'after' = 'dead_letter'
)
SELECT r.run_id, r.agent_id, r.agent_version, a.name, r.status, r.input, r.answer, r.error,
       r.lease_epoch, r.cancel_requested, r.created_at, r.finished_at, r.idempotency_key,
       r.parent_run_id,
       (SELECT count(*) FROM attempts) AS attempts,
       (SELECT count(*) FROM attempts, requeued WHERE attempts.seq > requeued.seq)
           AS attempts_since_requeue,
       (SELECT count(*) FROM attempts, requeued
        WHERE attempts.seq > requeued.seq
          AND (attempts.data->>'killed_sandbox')::boolean) AS deaths_since_requeue,
       (SELECT attempts.data->>'error' FROM attempts ORDER BY attempts.seq DESC LIMIT 1)
           AS last_error,
       (SELECT coalesce(sum((attempts.data->>'egress_refused_count')::bigint), 0)
        FROM attempts) AS egress_refused,
       s.attempt AS started, s.sandbox_id AS started_sandbox,
       (SELECT t.plan FROM tenants t WHERE t.tenant_id = r.tenant_id) AS plan
FROM runs r
JOIN agents a ON a.tenant_id = r.tenant_id AND a.agent_id = r.agent_id
LEFT JOIN LATERAL (
    SELECT (e.data->>'attempt')::integer AS attempt, e.data->>'sandbox_id' AS sandbox_id
    FROM run_events e
    WHERE e.tenant_id = $1 AND e.run_id = $2 AND e.type = $5
    ORDER BY e.seq DESC LIMIT 1
) s ON true
WHERE r.tenant_id = $1 AND r.run_id = $2 AND r.kind = 'activity'

-- name: lock_leased_activity
-- The fence for the dispatcher's writes: locked only under the caller's epoch, running.
SELECT 1 FROM runs
WHERE tenant_id = $1 AND run_id = $2 AND kind = 'activity' AND lease_epoch = $3
  AND status = 'running'
FOR UPDATE

-- name: end_activity
UPDATE runs SET status = $4, answer = $5, error = $6, finished_at = now(), updated_at = now(),
                lease_owner = NULL, lease_expires_at = NULL
WHERE tenant_id = $1 AND run_id = $2 AND kind = 'activity' AND lease_epoch = $3
  AND status = 'running'

-- name: retry_activity
-- Back to the queue after a retryable attempt, not claimable before $4.
UPDATE runs SET status = 'queued', lease_owner = NULL, lease_expires_at = NULL,
                available_at = $4, error = $5, updated_at = now()
WHERE tenant_id = $1 AND run_id = $2 AND kind = 'activity' AND lease_epoch = $3
  AND status = 'running'

-- name: dead_letter_activity
-- A dead letter waits (not ended: it may be requeued) and no claim takes a waiting run;
-- error says why, with dead_lettered: true.
UPDATE runs SET status = 'waiting', lease_owner = NULL, lease_expires_at = NULL,
                available_at = NULL, error = $4, updated_at = now()
WHERE tenant_id = $1 AND run_id = $2 AND kind = 'activity' AND lease_epoch = $3
  AND status = 'running'

-- name: lock_dead_letter
SELECT status, coalesce((error->>'dead_lettered')::boolean, false) AS dead_lettered
FROM runs
WHERE tenant_id = $1 AND run_id = $2 AND kind = 'activity'
FOR UPDATE

-- name: requeue_activity
UPDATE runs SET status = 'queued', error = NULL, available_at = NULL, updated_at = now()
WHERE tenant_id = $1 AND run_id = $2 AND kind = 'activity' AND status = 'waiting'

-- name: set_activity_slots
UPDATE tenant_policies SET max_activity_slots = $2 WHERE tenant_id = $1
RETURNING max_activity_slots
