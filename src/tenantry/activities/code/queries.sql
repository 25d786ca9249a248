-- Activity versions (ADR 0013). Every statement is scoped by tenant_id first and runs in a
-- tenant transaction (row-level security checks it again).

-- name: insert_agent
-- The agent that stands for the activity (its versions are what runs point at). Written
-- here, not through tenantry.agents.service, so the agent version, the bundle and the
-- activity version are one transaction: a publish is whole or absent.
INSERT INTO agents (tenant_id, agent_id, name, latest_version)
VALUES ($1, $2, $3, 1)
ON CONFLICT (tenant_id, name) DO NOTHING
RETURNING agent_id

-- name: lock_agent_by_name
SELECT a.agent_id, a.latest_version,
       (SELECT v.spec->>'model' FROM agent_versions v
        WHERE v.tenant_id = a.tenant_id AND v.agent_id = a.agent_id
        ORDER BY v.version LIMIT 1) AS first_model
FROM agents a
WHERE a.tenant_id = $1 AND a.name = $2
FOR UPDATE

-- name: bump_latest_version
UPDATE agents SET latest_version = $3 WHERE tenant_id = $1 AND agent_id = $2

-- name: insert_agent_version
INSERT INTO agent_versions (tenant_id, agent_id, version, spec, spec_sha256, tool_pins)
VALUES ($1, $2, $3, $4, $5, '{}'::jsonb)

-- name: insert_bundle
-- By digest: the same code published twice is stored once per tenant.
INSERT INTO activity_bundles (tenant_id, digest, entrypoint, files)
VALUES ($1, $2, $3, $4)
ON CONFLICT (tenant_id, digest) DO NOTHING

-- name: insert_version
INSERT INTO activity_versions (tenant_id, agent_id, version, name, bundle_digest, timeout_s,
                               heartbeat_timeout_s, max_attempts, backoff_s, secret_names,
                               egress, retryable_exit_codes, max_sandbox_deaths,
                               batch_max_tasks, batch_max_seconds, warm_idle_seconds)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16)

-- name: get_version
-- $3 NULL: the latest version.
SELECT v.agent_id, v.version, v.name, v.bundle_digest, v.timeout_s, v.heartbeat_timeout_s,
       v.max_attempts, v.backoff_s, v.secret_names, v.egress, v.retryable_exit_codes,
       v.max_sandbox_deaths, v.batch_max_tasks, v.batch_max_seconds, v.warm_idle_seconds,
       b.entrypoint, b.files
FROM activity_versions v
JOIN activity_bundles b ON b.tenant_id = v.tenant_id AND b.digest = v.bundle_digest
WHERE v.tenant_id = $1 AND v.name = $2 AND ($3::integer IS NULL OR v.version = $3)
ORDER BY v.version DESC
LIMIT 1

-- name: get_version_of_agent
SELECT v.agent_id, v.version, v.name, v.bundle_digest, v.timeout_s, v.heartbeat_timeout_s,
       v.max_attempts, v.backoff_s, v.secret_names, v.egress, v.retryable_exit_codes,
       v.max_sandbox_deaths, v.batch_max_tasks, v.batch_max_seconds, v.warm_idle_seconds,
       b.entrypoint, b.files
FROM activity_versions v
JOIN activity_bundles b ON b.tenant_id = v.tenant_id AND b.digest = v.bundle_digest
WHERE v.tenant_id = $1 AND v.agent_id = $2 AND v.version = $3

-- name: tenant_exists
SELECT EXISTS (SELECT 1 FROM tenants WHERE tenant_id = $1)

-- name: existing_secret_names
SELECT name FROM secrets WHERE tenant_id = $1 AND name = ANY($2::text[])
