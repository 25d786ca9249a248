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
