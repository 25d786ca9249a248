-- Retention (migration 0024, ADR 0017). The deleting functions are SECURITY DEFINER: the
-- application role holds no DELETE privilege on what they delete.

-- name: policy
SELECT runs_days, tombstones_days, audit_days, blobs_follow_runs, updated_at
FROM retention_policies WHERE tenant_id = $1

-- name: put_policy
INSERT INTO retention_policies AS p (tenant_id, runs_days, tombstones_days, audit_days,
                                     blobs_follow_runs)
VALUES ($1, $2, $3, $4, $5)
ON CONFLICT (tenant_id) DO UPDATE
    SET runs_days = $2, tombstones_days = $3, audit_days = $4, blobs_follow_runs = $5,
        updated_at = now()
RETURNING runs_days, tombstones_days, audit_days, blobs_follow_runs, updated_at

-- name: tenant_state
SELECT erased_at FROM tenants WHERE tenant_id = $1

-- name: lock_tenant
-- NO KEY: rows that refer to the tenant (runs, keys) are not held up by it.
SELECT erased_at FROM tenants WHERE tenant_id = $1 FOR NO KEY UPDATE

-- name: due_tenants
SELECT tenant_id FROM tenantry_cleanup_due($1, $2)

-- name: take_lease
SELECT tenantry_take_cleanup_lease($1, $2, $3)

-- name: keep_lease
SELECT tenantry_keep_cleanup_lease($1, $2, $3, $4, $5)

-- name: batch
-- One statement, so one transaction the server runs start to end (its fence included).
SELECT runs, events, blobs FROM tenantry_retention_batch($1, $2, $3, $4, $5, $6, $7, $8)

-- name: expire
SELECT tombstones, audit FROM tenantry_retention_expire($1, $2, $3, $4, $5, $6)

-- name: expire_exports
-- A tenant's exports past their expiry, or every one of an erased tenant (ADR 0044).
SELECT tenantry_expire_exports($1, $2, $3, $4, $5) AS gone

-- name: record_audit_expiry
-- Removing audit evidence is itself evidence: one row, which no later expiry removes.
INSERT INTO audit_log (tenant_id, audit_id, run_id, tool, server, key, outcome, detail,
                       duration_ms)
VALUES ($1, $2, '00000000-0000-0000-0000-000000000000', 'retention', NULL, $3,
        'audit_expired', $4, 0)

-- name: claim_blob_deletions
SELECT tenant_id, ref FROM tenantry_claim_blob_deletions($1, $2)

-- name: blob_deleted
SELECT tenantry_blob_deleted($1, $2, $3)

-- name: tombstone
SELECT run_id, kind, agent_id, agent_version, parent_run_id, status, created_at,
       started_at, ended_at, steps, events, input_tokens, output_tokens, cost_micros,
       reason, deleted_at
FROM tombstones WHERE tenant_id = $1 AND run_id = $2

-- name: tombstones
-- Newest deletion first; $2 the cursor (the last run id of the previous page, with its
-- deleted_at in $3).
SELECT tenant_id, run_id, kind, agent_id, agent_version, parent_run_id, status, created_at,
       started_at, ended_at, steps, events, input_tokens, output_tokens, cost_micros,
       reason, deleted_at
FROM tombstones
WHERE tenant_id = $1
  AND ($2::uuid IS NULL OR (deleted_at, run_id) < ($3::timestamptz, $2::uuid))
ORDER BY deleted_at DESC, run_id DESC
LIMIT $4

-- name: run_blocker
-- Why one run is not deletable now (DELETE /v1/runs/{id}), or NULL when it is gone.
SELECT r.status, (r.error->>'dead_lettered') = 'true' AS dead_lettered,
       r.webhook_state = 'pending' AS webhook_pending,
       EXISTS (SELECT 1 FROM runs c WHERE c.tenant_id = r.tenant_id
               AND c.parent_run_id = r.run_id
               AND c.status IN ('queued', 'running', 'waiting')
               AND (c.error->>'dead_lettered') IS DISTINCT FROM 'true') AS live_children,
       EXISTS (SELECT 1 FROM approvals a WHERE a.tenant_id = r.tenant_id
               AND a.run_id = r.run_id AND a.status = 'pending') AS pending_approval
FROM runs r WHERE r.tenant_id = $1 AND r.run_id = $2

-- name: start_erase
-- The tenant admits nothing from now on; the job is the one running for it, if any.
WITH marked AS (
    UPDATE tenants SET erased_at = coalesce(erased_at, now()) WHERE tenant_id = $1
    RETURNING tenant_id
)
INSERT INTO erase_jobs (job_id, tenant_id, requested_by, runs_total)
SELECT $2, m.tenant_id, $3, (SELECT count(*) FROM runs r WHERE r.tenant_id = $1)
FROM marked m
ON CONFLICT (tenant_id) WHERE status = 'running' DO NOTHING
RETURNING job_id

-- name: running_erase
SELECT job_id FROM erase_jobs WHERE tenant_id = $1 AND status = 'running'

-- name: live_runs
SELECT run_id FROM runs
WHERE tenant_id = $1 AND run_id > $2 AND status IN ('queued', 'running', 'waiting')
  AND (error->>'dead_lettered') IS DISTINCT FROM 'true'
ORDER BY run_id LIMIT $3

-- name: erase_state
SELECT secrets, tool_servers FROM tenantry_erase_tenant_state_v2($1)

-- name: erase_progress
UPDATE erase_jobs SET runs_deleted = runs_deleted + $2, runs_cancelled = runs_cancelled + $3,
                      secrets_deleted = secrets_deleted + $4,
                      tool_servers_deleted = tool_servers_deleted + $5,
                      blobs_queued = blobs_queued + $6
WHERE tenant_id = $1 AND status = 'running'

-- name: finish_erase
-- Done once the tenant has no run left (a running one is deleted once its worker ends it).
UPDATE erase_jobs j SET status = 'done', finished_at = now()
WHERE j.tenant_id = $1 AND j.status = 'running'
  AND NOT EXISTS (SELECT 1 FROM runs r WHERE r.tenant_id = $1)
RETURNING job_id

-- name: erase_job
SELECT job_id, tenant_id, status, runs_total, runs_deleted, runs_cancelled, secrets_deleted,
       tool_servers_deleted, blobs_queued, requested_by, created_at, finished_at
FROM erase_jobs WHERE tenant_id = $1 AND job_id = $2

-- name: any_erase_job
-- By id alone, across tenants: the operator's pool (the console role) only.
SELECT * FROM tenantry_console_erase_job($1)

-- name: runs_left
SELECT count(*) FROM runs WHERE tenant_id = $1

-- name: gauges
SELECT tenant_class, candidates, tombstones, blob_deletions, blob_bytes, lag_seconds,
       deleted_total, last_deleted
FROM tenantry_retention_gauges_v2($1)
