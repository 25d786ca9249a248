-- Activity tasks (ADR 0013): runs of kind 'activity', driven by the dispatcher. Attempts
-- are ActivityAttempted events; a requeue of a dead letter is RunResumed{after:
-- 'dead_letter'}, and attempts and sandbox deaths are counted after the last one.

-- Reading and cancelling them: lists for the tenant API, the attempt log, and the cancel.
-- Every statement is scoped by tenant_id first and runs in a tenant transaction (row-level
-- security checks it again). $-parameters that may be NULL mean "no filter"; a cursor is
-- the last key of the previous page.

-- name: list_activities
-- One row per activity: its latest version and when that was published, by name.
SELECT v.name, v.version AS latest_version, v.created_at AS updated_at,
       (SELECT f.created_at FROM activity_versions f
        WHERE f.tenant_id = v.tenant_id AND f.agent_id = v.agent_id AND f.version = 1)
           AS created_at
FROM activity_versions v
JOIN agents a ON a.tenant_id = v.tenant_id AND a.agent_id = v.agent_id
WHERE v.tenant_id = $1 AND v.version = a.latest_version
  AND ($2::text IS NULL OR v.name > $2)
ORDER BY v.name
LIMIT $3

-- name: list_tasks
-- Newest first. $3 status, $4 true: only dead letters (false: none of them), $5 the
-- activity's name; $6 ActivityAttempted.
SELECT r.run_id, r.agent_id, r.agent_version, a.name, r.status, r.input, r.answer, r.error,
       r.lease_epoch, r.cancel_requested, r.created_at, r.finished_at,
       counted.attempts, counted.last_error, counted.egress_refused
FROM runs r
JOIN agents a ON a.tenant_id = r.tenant_id AND a.agent_id = r.agent_id
CROSS JOIN LATERAL (
    SELECT count(*) AS attempts,
           (array_agg(coalesce(p.data, e.data)->>'error' ORDER BY e.seq DESC))[1]
               AS last_error,
           coalesce(sum((coalesce(p.data, e.data)->>'egress_refused_count')::bigint), 0)
               AS egress_refused
    FROM run_events e
    LEFT JOIN run_event_payloads p
      ON p.tenant_id = e.tenant_id AND p.run_id = e.run_id AND p.seq = e.seq
    WHERE e.tenant_id = r.tenant_id AND e.run_id = r.run_id AND e.type = $6
) AS counted
WHERE r.tenant_id = $1 AND r.kind = 'activity'
  AND ($2::uuid IS NULL OR r.run_id < $2)
  AND ($3::text IS NULL OR r.status = $3)
  AND ($4::boolean IS NULL
       OR $4 = (r.status = 'waiting'
                AND coalesce((r.error->>'dead_lettered')::boolean, false)))
  AND ($5::text IS NULL OR a.name = $5)
ORDER BY r.run_id DESC
LIMIT $7

-- name: task_exists
SELECT 1 FROM runs WHERE tenant_id = $1 AND run_id = $2 AND kind = 'activity'

-- name: attempts
-- The attempt log: ActivityAttempted ($3) events after seq $4, in order.
SELECT e.seq, coalesce(p.data, e.data) AS data, e.created_at
FROM run_events e
LEFT JOIN run_event_payloads p
  ON p.tenant_id = e.tenant_id AND p.run_id = e.run_id AND p.seq = e.seq
WHERE e.tenant_id = $1 AND e.run_id = $2 AND e.type = $3 AND e.seq > $4
ORDER BY e.seq
LIMIT $5

-- name: lock_for_cancel
SELECT status, cancel_requested FROM runs
WHERE tenant_id = $1 AND run_id = $2 AND kind = 'activity'
FOR UPDATE

-- name: mark_cancel_requested
UPDATE runs SET cancel_requested = true, updated_at = now()
WHERE tenant_id = $1 AND run_id = $2 AND kind = 'activity'

-- name: cancel_unheld
-- A task no dispatcher holds (queued, waiting for its backoff, dead-lettered) ends now.
UPDATE runs SET status = 'cancelled', finished_at = now(), updated_at = now(),
                available_at = NULL, lease_owner = NULL, lease_expires_at = NULL
WHERE tenant_id = $1 AND run_id = $2 AND kind = 'activity'
  AND status IN ('queued', 'waiting')

-- name: cancel_requested
-- Read by the dispatcher under its fence (the row is locked): was a cancel recorded?
SELECT cancel_requested FROM runs
WHERE tenant_id = $1 AND run_id = $2 AND kind = 'activity'

-- The dispatcher's claim, its task row and its writes under the lease; the requeue.

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
