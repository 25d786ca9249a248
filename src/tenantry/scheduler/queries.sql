-- name: get_policy
SELECT p.tenant_id, p.weight, p.max_running, p.max_queued, p.tokens_per_minute,
       p.monthly_spend_cap_micros, p.max_activity_slots, p.updated_at, t.approval_ttl_seconds,
       t.plan
FROM tenant_policies p JOIN tenants t ON t.tenant_id = p.tenant_id
WHERE p.tenant_id = $1

-- name: set_policy
UPDATE tenant_policies SET weight = $2, max_running = $3, max_queued = $4,
    tokens_per_minute = $5, monthly_spend_cap_micros = $6, max_activity_slots = $7,
    updated_at = now()
WHERE tenant_id = $1

-- name: set_approval_ttl
UPDATE tenants SET approval_ttl_seconds = $2 WHERE tenant_id = $1

-- name: get_load
-- The budget as it is once its closed reservations are folded (migration 0030).
SELECT l.queued, l.running, l.waiting,
       tenantry_month_spend(b) AS month_spend_micros, n.reserved_micros,
       tenantry_bucket_level(n, p) AS bucket_tokens
FROM tenant_load l JOIN tenant_policies p ON p.tenant_id = l.tenant_id
JOIN tenant_budget b ON b.tenant_id = l.tenant_id
CROSS JOIN LATERAL tenantry_budget_now(b) n
WHERE l.tenant_id = $1

-- name: lock_for_admission
-- Taken in the transaction that inserts the run: concurrent admissions of one tenant
-- queue here, so max_queued holds exactly.
-- It also reads whether the tenant is being erased (migration 0024): the refusal costs
-- no round trip of its own on POST /v1/runs; so does whether an operator paused its
-- admissions (migration 0025).
SELECT l.queued + l.running + l.waiting AS live, p.max_queued,
       tenantry_month_spend(b) AS month_spend_micros, p.monthly_spend_cap_micros,
       t.erased_at, t.admissions_paused_at
FROM tenant_load l JOIN tenant_policies p ON p.tenant_id = l.tenant_id
JOIN tenant_budget b ON b.tenant_id = l.tenant_id
JOIN tenants t ON t.tenant_id = l.tenant_id
WHERE l.tenant_id = $1
FOR UPDATE OF l

-- name: queue_depth
SELECT tenantry_queue_depth()

-- name: scheduler_gauges
SELECT * FROM tenantry_scheduler_gauges()

-- name: runs_by_status
SELECT * FROM tenantry_runs_by_status()

-- name: wake_spend_capped
-- Runs waiting for their tenant's monthly spend cap that may go on now, back to the queue
-- ($1: one tenant, NULL: all; $2: at most this many). Migration 0040, ADR 0035.
SELECT tenantry_wake_spend_capped($1, $2)

-- name: hold_spend_capped
-- Runs in flight queued while their tenant's spend is at its cap: waiting for the cap
-- instead, with a RunParked ($1: at most this many). Migration 0040, ADR 0035.
SELECT tenantry_hold_spend_capped($1)

-- name: parked_overdue
SELECT * FROM tenantry_parked_overdue()
