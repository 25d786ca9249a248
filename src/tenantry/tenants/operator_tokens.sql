-- The operator tokens in force (migration 0057; routines operator_token_*.sql).

-- name: valid_until
SELECT expires_at FROM tenantry_operator_token_valid($1)

-- name: seed
SELECT tenantry_operator_token_seed($1) AS in_force

-- name: rotate
SELECT tenantry_operator_token_rotate($1, $2, $3) AS others_end
