-- Activity tasks called as tools (ADR 0015). Every statement is scoped by tenant first and
-- runs in the tenant's transaction (row-level security checks it again).

-- name: task_parent
-- The run whose tool call enqueued the task (NULL for a task enqueued by the API or the
-- library), and the call's key (the task's idempotency key).
SELECT parent_run_id, idempotency_key FROM runs
WHERE tenant_id = $1 AND run_id = $2 AND kind = 'activity'

-- name: lock_parent
SELECT status FROM runs WHERE tenant_id = $1 AND run_id = $2 AND kind = 'agent' FOR UPDATE

-- name: already_returned
-- An ending over 8 KiB (a big result) keeps its data beside the log row.
SELECT 1 FROM run_events e
LEFT JOIN run_event_payloads p
  ON p.tenant_id = e.tenant_id AND p.run_id = e.run_id AND p.seq = e.seq
WHERE e.tenant_id = $1 AND e.run_id = $2 AND e.type = $3
  AND coalesce(p.data, e.data)->>'task_id' = $4
LIMIT 1

-- name: wake_parent
-- The run waits for its task (ActivityRequested, status waiting): back to the queue, so a
-- platform worker claims it and turns the ending into the call's result.
UPDATE runs SET status = 'queued', updated_at = now()
WHERE tenant_id = $1 AND run_id = $2 AND status = 'waiting'

-- name: lock_calling_run
-- The fence of the transaction that enqueues a tool call's task: locked only under the
-- caller's epoch while it is running. priority: the task's (it inherits the run's).
SELECT priority FROM runs
WHERE tenant_id = $1 AND run_id = $2 AND lease_epoch = $3 AND status = 'running'
FOR UPDATE

-- name: park_for_activity
-- Give the slot back until the task ends. If anything was appended to the log that the
-- driver did not see ($4: the last seq it knows, its own appends included) — the task's
-- ending racing the park, a cancel request — back to the queue instead: the next worker
-- reads it. Never a waiting run with nobody to wake it.
UPDATE runs SET status = CASE WHEN cancel_requested OR last_seq <> $4 THEN 'queued'
                              ELSE 'waiting' END,
                lease_owner = NULL, lease_expires_at = NULL, updated_at = now()
WHERE tenant_id = $1 AND run_id = $2 AND lease_epoch = $3 AND status = 'running'

-- name: task_of_call
-- The task a tool call ($2: its key) of this run ($3) enqueued already, if any.
SELECT run_id FROM runs
WHERE tenant_id = $1 AND idempotency_key = $2 AND parent_run_id = $3 AND kind = 'activity'
