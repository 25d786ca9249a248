-- The operator's action log: the console role's definer functions of migration 0025.

-- name: record_action
SELECT tenantry_console_record_action($1, $2, $3, $4, $5, $6)

-- name: actions
SELECT * FROM tenantry_console_actions($1, $2, $3)
