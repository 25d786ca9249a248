-- The operator's people (migration 0055): read and written on the console's pool only.

-- name: insert_operator
-- NULL when the address is already an operator's (the unique index).
INSERT INTO operator_users (user_id, email, role, created_by)
VALUES ($1, $2, $3, $4)
ON CONFLICT DO NOTHING
RETURNING user_id, email, role, created_by, created_at, disabled_at

-- name: get_operator
SELECT user_id, email, role, created_by, created_at, disabled_at
FROM operator_users WHERE user_id = $1

-- name: operators_page
-- Newest first (ids are UUIDv7), disabled ones included.
SELECT user_id, email, role, created_by, created_at, disabled_at
FROM operator_users WHERE ($1::uuid IS NULL OR user_id < $1)
ORDER BY user_id DESC
LIMIT $2

-- name: set_role
UPDATE operator_users SET role = $2
WHERE user_id = $1 AND disabled_at IS NULL
RETURNING user_id, email, role, created_by, created_at, disabled_at

-- name: disable_operator
-- Disabling twice keeps the first time; their unused links stop working with it.
WITH disabled AS (
    UPDATE operator_users SET disabled_at = coalesce(disabled_at, now())
    WHERE user_id = $1
    RETURNING user_id, email, role, created_by, created_at, disabled_at
), links AS (
    UPDATE operator_sign_in_links SET expires_at = least(expires_at, now())
    WHERE user_id = $1 AND used_at IS NULL AND EXISTS (SELECT 1 FROM disabled)
)
SELECT * FROM disabled

-- name: insert_link
INSERT INTO operator_sign_in_links (link_hash, user_id, created_by, expires_at)
SELECT $1, u.user_id, $3, now() + make_interval(secs => $4)
FROM operator_users u WHERE u.user_id = $2 AND u.disabled_at IS NULL
RETURNING expires_at

-- name: use_link
-- Once, unexpired, its operator enabled: otherwise no row.
UPDATE operator_sign_in_links l SET used_at = now()
FROM operator_users u
WHERE l.link_hash = $1 AND l.used_at IS NULL AND l.expires_at > now()
  AND u.user_id = l.user_id AND u.disabled_at IS NULL
RETURNING u.user_id, u.email, u.role

-- name: signed_in
-- Who a console session names, read on each of its requests: disabled, nobody.
SELECT user_id, email, role FROM operator_users
WHERE user_id = $1 AND disabled_at IS NULL

-- name: sign_in_oidc
-- The enabled operator of a verified address not bound to another identity, bound to this
-- one at the first sign-in.
UPDATE operator_users SET oidc_issuer = $1, oidc_subject = $2
WHERE lower(email) = lower($3) AND disabled_at IS NULL
  AND (oidc_subject IS NULL OR (oidc_issuer = $1 AND oidc_subject = $2))
RETURNING user_id, email, role
