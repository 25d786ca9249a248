-- name: get_tenant_key
SELECT wrapped_key, nonce, master_key_id FROM tenant_keys WHERE tenant_id = $1

-- name: insert_tenant_key
INSERT INTO tenant_keys (tenant_id, wrapped_key, nonce, master_key_id)
VALUES ($1, $2, $3, $4)
ON CONFLICT (tenant_id) DO NOTHING

-- name: upsert_secret
INSERT INTO secrets (tenant_id, name, ciphertext, nonce)
VALUES ($1, $2, $3, $4)
ON CONFLICT (tenant_id, name)
DO UPDATE SET ciphertext = excluded.ciphertext, nonce = excluded.nonce, updated_at = now()
RETURNING (xmax = 0) AS created, created_at, updated_at

-- name: get_secret
SELECT ciphertext, nonce FROM secrets WHERE tenant_id = $1 AND name = $2

-- name: secrets_page
SELECT name, created_at, updated_at FROM secrets
WHERE tenant_id = $1 AND ($2::text IS NULL OR name > $2)
ORDER BY name
LIMIT $3

-- name: secret_info
SELECT name, created_at, updated_at FROM secrets WHERE tenant_id = $1 AND name = $2

-- name: all_tenant_keys
-- Rotation only: run by the operator's CLI with the migrating role (it sees all tenants).
SELECT tenant_id, wrapped_key, nonce, master_key_id FROM tenant_keys FOR UPDATE

-- name: tenant_key_for_update
SELECT wrapped_key, nonce, master_key_id FROM tenant_keys WHERE tenant_id = $1 FOR UPDATE

-- name: sealed_account_secrets_of_tenant
SELECT account_id, provider, base_url, secret_sealed, secret_nonce, master_key_id,
       secret_binding
FROM model_accounts
WHERE tenant_id = $1 AND secret_sealed IS NOT NULL FOR UPDATE

-- name: rewrap_tenant_key
UPDATE tenant_keys SET wrapped_key = $2, nonce = $3, master_key_id = $4, rotated_at = now()
WHERE tenant_id = $1

-- name: all_sealed_account_secrets
-- Rotation and re-sealing: the migrating role only (the application role may not update
-- these columns, migration 0015).
SELECT account_id, provider, base_url, secret_sealed, secret_nonce, master_key_id,
       secret_binding
FROM model_accounts
WHERE secret_sealed IS NOT NULL FOR UPDATE

-- name: legacy_sealed_account_secrets
SELECT account_id, provider, base_url, secret_sealed, secret_nonce, master_key_id,
       secret_binding
FROM model_accounts
WHERE secret_sealed IS NOT NULL AND secret_binding = 1 FOR UPDATE

-- name: reseal_account_secret
UPDATE model_accounts SET secret_sealed = $2, secret_nonce = $3, master_key_id = $4,
                          secret_binding = $5, updated_at = now()
WHERE account_id = $1

-- name: delete_secret
DELETE FROM secrets WHERE tenant_id = $1 AND name = $2 RETURNING name
