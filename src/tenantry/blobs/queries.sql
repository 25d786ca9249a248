-- The blob registry (migration 0048, ADR 0042): a row per blob, a counted usage per tenant.

-- name: lock_usage
-- A write's first statement (blobs/store.py): the tenant's usage row, locked to the commit
-- (one tenant's writers take turns: none can overshoot the quota with another), and
-- whether the ref is already here (a retried write of the same content: counted once).
WITH usage AS (
    INSERT INTO blob_usage AS u (tenant_id) VALUES ($1) ON CONFLICT (tenant_id)
    DO UPDATE SET bytes = u.bytes
    RETURNING u.bytes
)
SELECT (SELECT bytes FROM usage) AS used,
       EXISTS (SELECT 1 FROM blobs b WHERE b.tenant_id = $1 AND b.ref = $2) AS known

-- name: add_blob
-- Its second: the row, before the object exists, and its bytes counted.
WITH added AS (
    INSERT INTO blobs (tenant_id, ref, run_id, kind, bytes) VALUES ($1, $2, $3, $4, $5)
    ON CONFLICT (tenant_id, ref) DO NOTHING
    RETURNING bytes
)
UPDATE blob_usage u SET bytes = u.bytes + a.bytes FROM added a WHERE u.tenant_id = $1

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
