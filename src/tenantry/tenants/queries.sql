-- name: insert_tenant
INSERT INTO tenants (tenant_id, name, region, plan, webhook_secret, home_cell)
VALUES ($1, $2, $3, $4, $5, $6)
ON CONFLICT (tenant_id) DO NOTHING
RETURNING tenant_id, name, region, plan, home_cell, created_at

-- name: set_webhook_secret
-- The operator's rotation: the old secret stops at once, and so does one a tenant's
-- rotation left signing (a leak is why an operator rotates).
UPDATE tenants SET webhook_secret = $2, webhook_secret_previous = NULL,
                   webhook_secret_previous_until = NULL
WHERE tenant_id = $1

-- name: get_tenant
SELECT tenant_id, name, region, plan, home_cell, created_at, erased_at
FROM tenants WHERE tenant_id = $1

-- name: insert_api_key
INSERT INTO api_keys (tenant_id, key_id, key_hash, key_prefix, name, scopes, expires_at,
                      created_by, replaces)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
RETURNING created_at

-- name: list_api_keys
SELECT key_id, key_prefix, name, created_at, revoked_at, scopes, expires_at, created_by, replaces
FROM api_keys WHERE tenant_id = $1
ORDER BY created_at

-- name: revoke_api_key
UPDATE api_keys SET revoked_at = coalesce(revoked_at, now())
WHERE tenant_id = $1 AND key_id = $2
RETURNING revoked_at

-- name: expire_api_key
-- A rotated key's overlap: it stops at $3 (never later than it already would).
UPDATE api_keys SET expires_at = least(coalesce(expires_at, $3), $3)
WHERE tenant_id = $1 AND key_id = $2 AND revoked_at IS NULL

-- name: get_api_key_for_update
SELECT key_id, key_prefix, name, created_at, revoked_at, scopes, expires_at, created_by, replaces
FROM api_keys WHERE tenant_id = $1 AND key_id = $2
FOR UPDATE

-- name: announce_revocation
SELECT pg_notify('tenantry_keys', '')

-- name: authenticate
-- What the key grants, and whether its tenant is being moved to another cell (migration
-- 0031). No row: no such key, or revoked.
SELECT k.tenant_id, k.key_id, k.scopes, k.expires_at,
       EXISTS (SELECT 1 FROM frozen_tenants f WHERE f.tenant_id = k.tenant_id) AS moving
FROM tenantry_authenticate_v2($1) k

-- name: tenants_page
-- Cross-tenant: through the definer function of migration 0011 (a bounded page).
SELECT * FROM tenantry_admin_tenants($1, $2)

-- name: api_keys_page
-- Newest first (key ids are UUIDv7); never the hash.
SELECT key_id, key_prefix, name, created_at, revoked_at, scopes, expires_at, created_by, replaces
FROM api_keys WHERE tenant_id = $1 AND ($2::uuid IS NULL OR key_id < $2)
ORDER BY key_id DESC
LIMIT $3

-- name: get_api_key
SELECT key_id, key_prefix, name, created_at, revoked_at, scopes, expires_at, created_by, replaces
FROM api_keys WHERE tenant_id = $1 AND key_id = $2

-- name: set_admissions_paused
-- Pausing a paused tenant keeps the first pause's time (when it really began).
UPDATE tenants
SET admissions_paused_at = CASE WHEN $2 THEN coalesce(admissions_paused_at, now()) END
WHERE tenant_id = $1
RETURNING tenant_id, admissions_paused_at

-- name: admissions_paused_at
SELECT admissions_paused_at FROM tenants WHERE tenant_id = $1

-- name: rotate_webhook_secret
-- The tenant's rotation (ADR 0045): the current secret keeps signing beside the new one
-- until now + $3 seconds ($3 = 0: it stops at once), and one replaced before is dropped.
UPDATE tenants t SET webhook_secret = $2,
    webhook_secret_previous = CASE WHEN $3::integer > 0 THEN t.webhook_secret END,
    webhook_secret_previous_until = CASE WHEN $3::integer > 0
                                         THEN now() + make_interval(secs => $3::integer) END
WHERE tenant_id = $1
RETURNING webhook_secret_previous_until
