-- name: insert_approval
INSERT INTO approvals (tenant_id, approval_id, run_id, key, tool, arguments, arguments_sha256,
                       expires_at)
SELECT $1, $2, $3, $4, $5, $6, $7, now() + make_interval(secs => t.approval_ttl_seconds)
FROM tenants t WHERE t.tenant_id = $1
ON CONFLICT (tenant_id, key) DO NOTHING
RETURNING approval_id, expires_at

-- name: approval_by_key
SELECT approval_id, expires_at FROM approvals WHERE tenant_id = $1 AND key = $2

-- name: get_approval
SELECT approval_id, run_id, key, tool, arguments, status, comment, requested_at, expires_at,
       decided_at
FROM approvals WHERE tenant_id = $1 AND approval_id = $2

-- name: list_approvals
SELECT approval_id, run_id, key, tool, arguments, status, comment, requested_at, expires_at,
       decided_at
FROM approvals
WHERE tenant_id = $1 AND ($2::text IS NULL OR status = $2)
  AND ($3::uuid IS NULL OR approval_id < $3)
ORDER BY approval_id DESC
LIMIT $4

-- name: approved_call
SELECT arguments_sha256 FROM approvals
WHERE tenant_id = $1 AND key = $2 AND status = 'approved'
