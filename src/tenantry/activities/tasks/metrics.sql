-- name: dead_letter_gauge
-- Migration 0021; the console role's (Platform.cross_tenant_db).
SELECT tenant_class, dead_lettered FROM tenantry_dead_letter_gauge()
