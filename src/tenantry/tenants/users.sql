-- name: insert_user
-- NULL when the address is already one of the tenant's users (the unique index).
INSERT INTO tenant_users (tenant_id, user_id, email, role, created_by)
VALUES ($1, $2, $3, $4, $5)
ON CONFLICT DO NOTHING
RETURNING user_id, email, role, created_by, created_at, disabled_at

-- name: get_user
SELECT user_id, email, role, created_by, created_at, disabled_at
FROM tenant_users WHERE tenant_id = $1 AND user_id = $2

-- name: users_page
-- Newest first (user ids are UUIDv7), disabled ones included.
SELECT user_id, email, role, created_by, created_at, disabled_at
FROM tenant_users WHERE tenant_id = $1 AND ($2::uuid IS NULL OR user_id < $2)
ORDER BY user_id DESC
LIMIT $3

-- name: set_role
UPDATE tenant_users SET role = $3
WHERE tenant_id = $1 AND user_id = $2 AND disabled_at IS NULL
RETURNING user_id, email, role, created_by, created_at, disabled_at

-- name: disable_user
-- Disabling twice keeps the first time.
UPDATE tenant_users SET disabled_at = coalesce(disabled_at, now())
WHERE tenant_id = $1 AND user_id = $2
RETURNING user_id, email, role, created_by, created_at, disabled_at

-- name: end_sessions_of_user
UPDATE app_sessions SET revoked_at = now()
WHERE tenant_id = $1 AND user_id = $2 AND revoked_at IS NULL

-- name: end_links_of_user
UPDATE sign_in_links SET expires_at = least(expires_at, now())
WHERE tenant_id = $1 AND user_id = $2 AND used_at IS NULL

-- name: insert_link
INSERT INTO sign_in_links (tenant_id, link_hash, user_id, created_by, expires_at)
VALUES ($1, $2, $3, $4, now() + make_interval(secs => $5))
RETURNING expires_at

-- name: sign_in
-- Cross-tenant: the link's tenant is not known yet (routine app_sign_in.sql).
SELECT tenant_id, user_id FROM tenantry_app_sign_in($1, $2, $3)

-- name: session
-- Cross-tenant: the cookie's tenant is not known yet (routine app_session.sql).
SELECT tenant_id, user_id, email, role, expires_at FROM tenantry_app_session($1)

-- name: end_session
UPDATE app_sessions SET revoked_at = coalesce(revoked_at, now())
WHERE tenant_id = $1 AND session_hash = $2

-- name: tenant_erased_at
SELECT erased_at FROM tenants WHERE tenant_id = $1

-- name: sign_in_oidc
-- Cross-tenant: the person's tenant is not known yet (routine app_sign_in_oidc.sql).
SELECT tenant_id, user_id, signed_in FROM tenantry_app_sign_in_oidc($1, $2, $3, $4, $5, $6)
