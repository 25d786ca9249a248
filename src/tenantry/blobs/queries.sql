-- The blob registry (migration 0048, ADR 0042): a row per blob, a counted usage per tenant.

-- name: add_blob
-- The row first, then the object (routine add_blob: one round trip).
SELECT stored, used FROM tenantry_add_blob($1, $2, $3, $4, $5, $6)

-- name: forget_blob
-- The object is gone: its row and its bytes go too (no row: a blob from before the
-- registry, nothing to count).
WITH gone AS (
    DELETE FROM blobs b WHERE b.tenant_id = $1 AND b.ref = $2 RETURNING b.bytes
)
UPDATE blob_usage u SET bytes = greatest(u.bytes - g.bytes, 0) FROM gone g
WHERE u.tenant_id = $1

-- name: run_blob
SELECT ref, run_id, kind, bytes, created_at FROM blobs
WHERE tenant_id = $1 AND run_id = $2 AND ref = $3

-- name: run_blobs
SELECT ref, run_id, kind, bytes, created_at FROM blobs
WHERE tenant_id = $1 AND run_id = $2
ORDER BY created_at, ref

-- name: usage
SELECT coalesce((SELECT bytes FROM blob_usage WHERE tenant_id = $1), 0) AS bytes
