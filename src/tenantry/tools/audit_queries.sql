-- name: insert_audit
INSERT INTO audit_log (tenant_id, audit_id, run_id, tool, server, key, arguments_sha256,
                       outcome, detail, duration_ms)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)
