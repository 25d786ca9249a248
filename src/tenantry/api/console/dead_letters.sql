-- The console's dead-letter list: the console role's definer function of migration 0021.

-- name: dead_letters
SELECT * FROM tenantry_console_dead_letters($1, $2, $3)
