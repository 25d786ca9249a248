-- name: insert_agent
INSERT INTO agents (tenant_id, agent_id, name, latest_version, live_version)
VALUES ($1, $2, $3, 1, 1)
ON CONFLICT (tenant_id, name) DO NOTHING
RETURNING created_at

-- name: lock_agent
SELECT name, latest_version, live_version, created_at FROM agents
WHERE tenant_id = $1 AND agent_id = $2
FOR UPDATE

-- name: bump_latest_version
UPDATE agents SET latest_version = $3
WHERE tenant_id = $1 AND agent_id = $2

-- name: insert_version
INSERT INTO agent_versions (tenant_id, agent_id, version, spec, spec_sha256, tool_pins)
VALUES ($1, $2, $3, $4, $5, $6)
RETURNING created_at

-- name: current_tool_pins
SELECT tool.name AS tool, s.name AS server, encode(s.tools_sha256, 'hex') AS sha256
FROM tool_servers s, jsonb_array_elements(s.tools) AS t(def),
     LATERAL (SELECT t.def->>'name' AS name) AS tool
WHERE s.tenant_id = $1 AND tool.name = ANY($2::text[])

-- name: get_agent
SELECT a.name, v.version, v.spec, v.tool_pins, v.created_at, a.live_version
FROM agents a
JOIN agent_versions v
  ON v.tenant_id = a.tenant_id AND v.agent_id = a.agent_id AND v.version = a.latest_version
WHERE a.tenant_id = $1 AND a.agent_id = $2

-- name: get_live_agent
SELECT a.name, v.version, v.spec, v.tool_pins, v.created_at, a.live_version
FROM agents a
JOIN agent_versions v
  ON v.tenant_id = a.tenant_id AND v.agent_id = a.agent_id AND v.version = a.live_version
WHERE a.tenant_id = $1 AND a.agent_id = $2

-- name: get_version
SELECT a.name, v.version, v.spec, v.tool_pins, v.created_at, a.live_version
FROM agent_versions v
JOIN agents a ON a.tenant_id = v.tenant_id AND a.agent_id = v.agent_id
WHERE v.tenant_id = $1 AND v.agent_id = $2 AND v.version = $3

-- name: list_agents
SELECT a.agent_id, a.name, a.latest_version, a.live_version, a.created_at
FROM agents a
WHERE a.tenant_id = $1 AND ($2::uuid IS NULL OR a.agent_id < $2)
ORDER BY a.agent_id DESC
LIMIT $3

-- name: count_refused_egress
-- Adds $4 refused egress attempts to the version's count; flags it once the count reaches
-- $5 (the first time only: `since` stays when it was first flagged).
INSERT INTO agent_version_flags AS f (tenant_id, agent_id, version, refused_egress, reason,
                                      flagged_at)
VALUES ($1, $2, $3, $4::bigint, CASE WHEN $4::bigint >= $5::bigint THEN 'egress_refused' END,
        CASE WHEN $4::bigint >= $5::bigint THEN now() END)
ON CONFLICT (tenant_id, agent_id, version) DO UPDATE
SET refused_egress = f.refused_egress + EXCLUDED.refused_egress,
    reason = COALESCE(f.reason, CASE WHEN f.refused_egress + EXCLUDED.refused_egress
                                          >= $5::bigint THEN 'egress_refused' END),
    flagged_at = COALESCE(f.flagged_at, CASE WHEN f.refused_egress + EXCLUDED.refused_egress
                                                  >= $5::bigint THEN now() END),
    updated_at = now()
RETURNING refused_egress, reason, flagged_at

-- name: version_flag
SELECT refused_egress, reason, flagged_at FROM agent_version_flags
WHERE tenant_id = $1 AND agent_id = $2 AND version = $3 AND flagged_at IS NOT NULL

-- name: set_live_version
UPDATE agents SET live_version = $3 WHERE tenant_id = $1 AND agent_id = $2

-- name: insert_promotion
INSERT INTO agent_promotions (tenant_id, agent_id, promotion_id, version, previous_version,
                              promoted_by, evaluation_id)
VALUES ($1, $2, $3, $4, $5, $6, $7)
RETURNING promoted_at

-- name: list_promotions
SELECT promotion_id, version, previous_version, promoted_by, evaluation_id, promoted_at
FROM agent_promotions
WHERE tenant_id = $1 AND agent_id = $2
ORDER BY promoted_at DESC, promotion_id
LIMIT $3
