-- Scheduled billing reconciliation (migration 0058): its lease, each account's days, and the
-- operator's webhook outbox. The lease's clock is the job's (its `now`, passed in), so a
-- pass run with a given clock sees expiry as that clock does.

-- name: take_lease
-- Free, expired or already ours: ours, its epoch bumped unless we hold it still.
INSERT INTO billing_reconcile_lease AS l (job, owner, epoch, expires_at)
VALUES ('billing_reconcile', $1, 1, $2::timestamptz + make_interval(secs => $3))
ON CONFLICT (job) DO UPDATE
    SET owner = $1, expires_at = $2::timestamptz + make_interval(secs => $3),
        epoch = CASE WHEN l.owner = $1 AND l.expires_at >= $2 THEN l.epoch
                     ELSE l.epoch + 1 END
    WHERE l.owner IS NULL OR l.expires_at IS NULL OR l.expires_at < $2 OR l.owner = $1
RETURNING l.epoch

-- name: fence
-- First in every transaction that records under the lease: the row stays locked to the
-- commit, so a taker waits for it and then finds the epoch it must bump.
SELECT 1 FROM billing_reconcile_lease
WHERE job = 'billing_reconcile' AND owner = $1 AND epoch = $2 AND expires_at >= $3
FOR UPDATE

-- name: release_lease
UPDATE billing_reconcile_lease SET owner = NULL, expires_at = NULL
WHERE job = 'billing_reconcile' AND owner = $1 AND epoch = $2

-- name: last_day
SELECT max(day) FROM billing_reconcile_days WHERE account = $1

-- name: due_pending
SELECT day, attempts FROM billing_reconcile_days
WHERE account = $1 AND status = 'pending' AND next_attempt_at <= $2
ORDER BY day

-- name: attempts
SELECT status, attempts FROM billing_reconcile_days WHERE account = $1 AND day = $2

-- name: record_done
INSERT INTO billing_reconcile_days AS d (account, day, status, attempts, reconciliation_id,
                                         difference_ratio, flagged, updated_at)
VALUES ($1, $2, 'done', $3, $4, $5, $6, $7)
ON CONFLICT (account, day) DO UPDATE
    SET status = 'done', attempts = $3, next_attempt_at = NULL, last_error = NULL,
        reconciliation_id = $4, difference_ratio = $5, flagged = $6, updated_at = $7
    WHERE d.status = 'pending'
RETURNING d.status

-- name: record_waiting
-- Pending (next_attempt_at set) or late (NULL): only a day not settled yet changes.
INSERT INTO billing_reconcile_days AS d (account, day, status, attempts, next_attempt_at,
                                         last_error, updated_at)
VALUES ($1, $2, $3, $4, $5, left($6, 500), $7)
ON CONFLICT (account, day) DO UPDATE
    SET status = $3, attempts = $4, next_attempt_at = $5, last_error = left($6, 500),
        updated_at = $7
    WHERE d.status = 'pending'
RETURNING d.status

-- name: queue_notification
INSERT INTO operator_notifications (account, day, kind, body, next_attempt_at, created_at)
VALUES ($1, $2, $3, $4, $5, $5)
ON CONFLICT (account, day, kind) DO NOTHING

-- name: due_notifications
SELECT account, day, kind, body, attempts FROM operator_notifications
WHERE next_attempt_at <= $1
ORDER BY next_attempt_at, account, day, kind
LIMIT $2

-- name: notification_tried
-- $4 NULL: delivered ($5 its time) or given up ($6 the last error).
UPDATE operator_notifications
SET attempts = attempts + 1, next_attempt_at = $4, delivered_at = $5,
    last_error = left($6, 500)
WHERE account = $1 AND day = $2 AND kind = $3 AND delivered_at IS NULL

-- name: gauges
-- Per account: the largest difference on its most recent reconciled day, its late days
-- since $1, and its most recent reconciled day.
SELECT a.account,
       (SELECT d.difference_ratio FROM billing_reconcile_days d
        WHERE d.account = a.account AND d.status = 'done'
        ORDER BY d.day DESC LIMIT 1) AS difference_ratio,
       count(*) FILTER (WHERE a.status = 'late' AND a.day >= $1) AS late,
       max(a.day) FILTER (WHERE a.status = 'done') AS last_day
FROM billing_reconcile_days a
GROUP BY a.account
ORDER BY a.account
