-- name: insert_cell
INSERT INTO cells (name, region, api_url, operator_token, dedicated)
VALUES ($1, $2, $3, $4, $5)
ON CONFLICT (name) DO NOTHING
RETURNING name, region, api_url, operator_token, dedicated, created_at

-- name: cell_named
SELECT name, region, api_url, operator_token, dedicated, created_at FROM cells WHERE name = $1

-- name: cells_with_counts
SELECT c.name, c.region, c.api_url, c.operator_token, c.dedicated, c.created_at,
       (SELECT count(*) FROM tenants t WHERE t.home_cell = c.name) AS tenants
FROM cells c ORDER BY c.region, c.name

-- name: least_loaded_cell
-- Placement: the shared cell of the region holding the fewest tenants (ties by name).
SELECT c.name, c.region, c.api_url, c.operator_token, c.dedicated, c.created_at
FROM cells c
WHERE c.region = $1 AND NOT c.dedicated
ORDER BY (SELECT count(*) FROM tenants t WHERE t.home_cell = c.name), c.name
LIMIT 1

-- name: insert_tenant
INSERT INTO tenants (tenant_id, region, home_cell) VALUES ($1, $2, $3)
ON CONFLICT (tenant_id) DO NOTHING
RETURNING tenant_id

-- name: home_of
SELECT t.tenant_id, t.region, t.state, c.name, c.region AS cell_region, c.api_url,
       c.operator_token, c.dedicated, c.created_at
FROM tenants t JOIN cells c ON c.name = t.home_cell
WHERE t.tenant_id = $1

-- name: route_for_key
SELECT t.tenant_id, t.region, t.state, c.name, c.region AS cell_region, c.api_url,
       c.operator_token, c.dedicated, c.created_at
FROM api_keys k
JOIN tenants t ON t.tenant_id = k.tenant_id
JOIN cells c ON c.name = t.home_cell
WHERE k.key_hash = $1 AND k.revoked_at IS NULL

-- name: set_tenant_state
UPDATE tenants SET state = $2, updated_at = now() WHERE tenant_id = $1

-- name: switch_home_cell
UPDATE tenants SET home_cell = $2, updated_at = now() WHERE tenant_id = $1

-- name: insert_api_key
INSERT INTO api_keys (key_hash, key_id, tenant_id) VALUES ($1, $2, $3)
ON CONFLICT (key_hash) DO NOTHING

-- name: revoke_api_key
UPDATE api_keys SET revoked_at = coalesce(revoked_at, now())
WHERE tenant_id = $1 AND key_id = $2
