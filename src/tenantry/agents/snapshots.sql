-- Provider model snapshots per agent and model (migration 0037, agents/snapshots.py).

-- name: note
-- True: this call noticed a change (a snapshot other than the accepted and the last change);
-- $5 the owner of the account that reported it (0039).
SELECT tenantry_note_model_snapshot_v2($1, $2, $3, $4, $5) AS changed

-- name: agent_exists
SELECT EXISTS (SELECT 1 FROM agents WHERE tenant_id = $1 AND agent_id = $2)

-- name: list
SELECT model, accepted, accepted_at, changed_to, changed_at, held, accepted_on,
       changed_on
FROM agent_model_snapshots
WHERE tenant_id = $1 AND agent_id = $2
ORDER BY model

-- name: promotions
-- Newest first; bounded (an agent promotes rarely; the list shows the latest).
SELECT model, previous, provider_model, promoted_by, promoted_at
FROM agent_model_snapshot_promotions
WHERE tenant_id = $1 AND agent_id = $2
ORDER BY promoted_at DESC, promotion_id
LIMIT $3

-- name: any_changed
SELECT EXISTS (SELECT 1 FROM agent_model_snapshots
               WHERE tenant_id = $1 AND agent_id = $2 AND changed_to IS NOT NULL)

-- name: hold
UPDATE agent_model_snapshots SET held = $4, updated_at = now()
WHERE tenant_id = $1 AND agent_id = $2 AND model = $3
RETURNING model, accepted, accepted_at, changed_to, changed_at, held, accepted_on,
       changed_on

-- name: lock
SELECT model, accepted, accepted_at, changed_to, changed_at, held, accepted_on,
       changed_on
FROM agent_model_snapshots
WHERE tenant_id = $1 AND agent_id = $2 AND model = $3
FOR UPDATE

-- name: promote
UPDATE agent_model_snapshots
SET accepted = $4, accepted_at = now(), changed_to = NULL, changed_at = NULL,
    updated_at = now()
WHERE tenant_id = $1 AND agent_id = $2 AND model = $3
RETURNING model, accepted, accepted_at, changed_to, changed_at, held, accepted_on,
       changed_on

-- name: record_promotion
INSERT INTO agent_model_snapshot_promotions (tenant_id, agent_id, model, promotion_id,
                                             previous, provider_model, promoted_by)
VALUES ($1, $2, $3, $4, $5, $6, $7)
