-- name: insert_audit
INSERT INTO audit_log (tenant_id, audit_id, run_id, tool, server, key, arguments_sha256,
                       outcome, detail, duration_ms)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)

-- name: approved_call
SELECT arguments_sha256 FROM approvals
WHERE tenant_id = $1 AND key = $2 AND status = 'approved'
