-- name: insert_endpoint
-- In the first free slot of ten (the table's UNIQUE slot bounds a tenant's endpoints, two
-- registrations at once included): no row when every slot is taken, or when another
-- registration took the same slot meanwhile (the caller looks again).
INSERT INTO webhook_endpoints (tenant_id, endpoint_id, slot, url, statuses, agent_ids,
                               description)
SELECT $1, $2, s.slot, $3, $4, $5, $6
FROM generate_series(1, 10) AS s (slot)
WHERE NOT EXISTS (SELECT 1 FROM webhook_endpoints w WHERE w.tenant_id = $1 AND w.slot = s.slot)
ORDER BY s.slot
LIMIT 1
ON CONFLICT (tenant_id, slot) DO NOTHING
RETURNING endpoint_id, url, statuses, agent_ids, description, created_at

-- name: count_endpoints
SELECT count(*) FROM webhook_endpoints WHERE tenant_id = $1

-- name: known_agents
SELECT agent_id FROM agents WHERE tenant_id = $1 AND agent_id = ANY ($2::uuid[])

-- name: list_endpoints
SELECT endpoint_id, url, statuses, agent_ids, description, created_at
FROM webhook_endpoints
WHERE tenant_id = $1 AND ($2::uuid IS NULL OR endpoint_id > $2)
ORDER BY endpoint_id
LIMIT $3

-- name: get_endpoint
SELECT endpoint_id, url, statuses, agent_ids, description, created_at
FROM webhook_endpoints WHERE tenant_id = $1 AND endpoint_id = $2

-- name: delete_endpoint
-- Its pending deliveries go with it (the outbox's foreign key); its history stays.
DELETE FROM webhook_endpoints WHERE tenant_id = $1 AND endpoint_id = $2

-- name: delivery_history
-- Newest first; $2: the cursor (the last attempt of the previous page); $3, $4: only the
-- run's, only the endpoint's.
SELECT delivery_id, run_id, endpoint_id, url, attempt, attempted_at, outcome, status_code,
       error
FROM webhook_attempts
WHERE tenant_id = $1
  AND ($2::uuid IS NULL OR delivery_id < $2)
  AND ($3::uuid IS NULL OR run_id = $3)
  AND ($4::uuid IS NULL OR endpoint_id = $4)
ORDER BY delivery_id DESC
LIMIT $5
