-- The next task of a batch and the warm-state cap (ADR 0014).

-- name: claim_next_activity
-- A queued task of this tenant and activity version only, under the tenant's policy and
-- max_activity_slots (migration 0022).
SELECT tenant_id, run_id, lease_epoch
FROM tenantry_claim_activity_next($1, $2, $3, $4, $5)

-- name: activity_slots
SELECT max_activity_slots FROM tenant_policies WHERE tenant_id = $1
