-- name: lock_approval
SELECT a.approval_id, a.run_id, a.key, a.tool, a.arguments, a.status, a.comment,
       a.requested_at, a.expires_at, a.decided_at, r.status AS run_status
FROM approvals a JOIN runs r ON r.tenant_id = a.tenant_id AND r.run_id = a.run_id
WHERE a.tenant_id = $1 AND a.approval_id = $2
FOR UPDATE OF a, r

-- name: set_decision
UPDATE approvals SET status = $3, comment = $4, decided_at = now()
WHERE tenant_id = $1 AND approval_id = $2 AND status = 'pending'

-- name: requeue_waiting_run
UPDATE runs SET status = 'queued', updated_at = now()
WHERE tenant_id = $1 AND run_id = $2 AND status = 'waiting'

-- name: expired_approvals
SELECT tenant_id, approval_id FROM tenantry_expired_approvals($1, $2)
