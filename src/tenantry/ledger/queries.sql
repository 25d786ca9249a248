-- name: reserve
-- period_ends: when the month the spend is counted in ends (the cap's roll-over), as the
-- reservation's own now() sees it.
SELECT outcome, wait_seconds, spent, cap,
       date_trunc('month', now()) + interval '1 month' AS period_ends
FROM tenantry_reserve($1, $2, $3, $4, $5, $6)

-- name: close_reservation
SELECT tenantry_close_reservation($1, $2, $3, $4, $5, $6, $7)

-- name: insert_usage_fact
INSERT INTO usage_facts (tenant_id, run_id, seq, agent_id, agent_version, provider, account,
                         model, input_tokens, cached_input_tokens, cache_write_input_tokens,
                         output_tokens, cost_micros, price_version, account_owner)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15)

-- name: insert_sandbox_usage_fact
INSERT INTO sandbox_usage_facts (tenant_id, run_id, seq, agent_id, agent_version, backend,
                                 sandbox_ms, cost_micros, price_version)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)

-- name: sweep_reservations
SELECT tenantry_sweep_reservations($1)

-- name: usage_by_agent
-- Each sum also over the calls through the tenant's own accounts (own_*: bring your own
-- key). A fact from before account_owner (migration 0050) is its account's, looked up.
WITH f AS (
    SELECT u.*, coalesce(u.account_owner = 'tenant', u.account IN (
               SELECT a.account_id FROM model_accounts a WHERE a.tenant_id = $1)) AS own
    FROM usage_facts u
    WHERE u.tenant_id = $1 AND u.created_at >= $2 AND u.created_at < $3
)
SELECT agent_id::text AS key, count(*) AS calls, sum(input_tokens) AS input_tokens,
       sum(cached_input_tokens) AS cached_input_tokens, sum(output_tokens) AS output_tokens,
       sum(cost_micros) AS cost_micros, count(DISTINCT run_id) AS runs,
       count(*) FILTER (WHERE own) AS own_calls,
       sum(input_tokens) FILTER (WHERE own) AS own_input_tokens,
       sum(cached_input_tokens) FILTER (WHERE own) AS own_cached_input_tokens,
       sum(output_tokens) FILTER (WHERE own) AS own_output_tokens,
       sum(cost_micros) FILTER (WHERE own) AS own_cost_micros
FROM f
GROUP BY agent_id ORDER BY agent_id

-- name: usage_by_day
WITH f AS (
    SELECT u.*, coalesce(u.account_owner = 'tenant', u.account IN (
               SELECT a.account_id FROM model_accounts a WHERE a.tenant_id = $1)) AS own
    FROM usage_facts u
    WHERE u.tenant_id = $1 AND u.created_at >= $2 AND u.created_at < $3
)
SELECT to_char(date_trunc('day', created_at AT TIME ZONE 'UTC'), 'YYYY-MM-DD') AS key,
       count(*) AS calls, sum(input_tokens) AS input_tokens,
       sum(cached_input_tokens) AS cached_input_tokens, sum(output_tokens) AS output_tokens,
       sum(cost_micros) AS cost_micros, count(DISTINCT run_id) AS runs,
       count(*) FILTER (WHERE own) AS own_calls,
       sum(input_tokens) FILTER (WHERE own) AS own_input_tokens,
       sum(cached_input_tokens) FILTER (WHERE own) AS own_cached_input_tokens,
       sum(output_tokens) FILTER (WHERE own) AS own_output_tokens,
       sum(cost_micros) FILTER (WHERE own) AS own_cost_micros
FROM f
GROUP BY 1 ORDER BY 1

-- name: usage_total
WITH f AS (
    SELECT u.*, coalesce(u.account_owner = 'tenant', u.account IN (
               SELECT a.account_id FROM model_accounts a WHERE a.tenant_id = $1)) AS own
    FROM usage_facts u
    WHERE u.tenant_id = $1 AND u.created_at >= $2 AND u.created_at < $3
)
SELECT count(*) AS calls, coalesce(sum(input_tokens), 0) AS input_tokens,
       coalesce(sum(cached_input_tokens), 0) AS cached_input_tokens,
       coalesce(sum(output_tokens), 0) AS output_tokens,
       coalesce(sum(cost_micros), 0) AS cost_micros, count(DISTINCT run_id) AS runs,
       count(*) FILTER (WHERE own) AS own_calls,
       sum(input_tokens) FILTER (WHERE own) AS own_input_tokens,
       sum(cached_input_tokens) FILTER (WHERE own) AS own_cached_input_tokens,
       sum(output_tokens) FILTER (WHERE own) AS own_output_tokens,
       sum(cost_micros) FILTER (WHERE own) AS own_cost_micros
FROM f

-- name: sandbox_by_agent
SELECT agent_id::text AS key, sum(sandbox_ms) AS sandbox_ms,
       sum(cost_micros) AS sandbox_cost_micros,
       count(*) FILTER (WHERE attempt IS NOT NULL) AS activity_attempts,
       sum(sandbox_ms) FILTER (WHERE attempt IS NOT NULL) AS activity_sandbox_ms,
       sum(cpu_us) AS activity_cpu_us, max(peak_memory_bytes) AS activity_peak_memory_bytes,
       sum(cost_micros) FILTER (WHERE attempt IS NOT NULL) AS activity_cost_micros,
       count(DISTINCT run_id) AS runs
FROM sandbox_usage_facts
WHERE tenant_id = $1 AND created_at >= $2 AND created_at < $3
GROUP BY agent_id ORDER BY agent_id

-- name: sandbox_by_day
SELECT to_char(date_trunc('day', created_at AT TIME ZONE 'UTC'), 'YYYY-MM-DD') AS key,
       sum(sandbox_ms) AS sandbox_ms, sum(cost_micros) AS sandbox_cost_micros,
       count(*) FILTER (WHERE attempt IS NOT NULL) AS activity_attempts,
       sum(sandbox_ms) FILTER (WHERE attempt IS NOT NULL) AS activity_sandbox_ms,
       sum(cpu_us) AS activity_cpu_us, max(peak_memory_bytes) AS activity_peak_memory_bytes,
       sum(cost_micros) FILTER (WHERE attempt IS NOT NULL) AS activity_cost_micros,
       count(DISTINCT run_id) AS runs
FROM sandbox_usage_facts
WHERE tenant_id = $1 AND created_at >= $2 AND created_at < $3
GROUP BY 1 ORDER BY 1

-- name: sandbox_total
SELECT coalesce(sum(sandbox_ms), 0) AS sandbox_ms,
       count(*) FILTER (WHERE attempt IS NOT NULL) AS activity_attempts,
       sum(sandbox_ms) FILTER (WHERE attempt IS NOT NULL) AS activity_sandbox_ms,
       sum(cpu_us) AS activity_cpu_us, max(peak_memory_bytes) AS activity_peak_memory_bytes,
       sum(cost_micros) FILTER (WHERE attempt IS NOT NULL) AS activity_cost_micros,
       coalesce(sum(cost_micros), 0) AS sandbox_cost_micros
FROM sandbox_usage_facts
WHERE tenant_id = $1 AND created_at >= $2 AND created_at < $3

-- name: usage_per_tenant
SELECT * FROM tenantry_usage_per_tenant_v2($1, $2)

-- name: usage_per_account_day
SELECT * FROM tenantry_usage_per_account_day($1, $2, $3)

-- name: insert_reconciliation
-- A scheduled one ($10: its one day) is stored once per account and day (migration 0058):
-- a second insert of the same day is nothing, and returns no row.
INSERT INTO billing_reconciliations (reconciliation_id, account, provider, from_day, to_day,
                                     source, cost_compared, flagged_days, days, scheduled_day)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)
ON CONFLICT (account, scheduled_day) WHERE scheduled_day IS NOT NULL DO NOTHING
RETURNING created_at

-- name: recent_reconciliations
SELECT reconciliation_id, account, provider, from_day, to_day, source, cost_compared,
       flagged_days, days, created_at
FROM billing_reconciliations
WHERE ($1::text IS NULL OR account = $1)
ORDER BY created_at DESC, reconciliation_id DESC
LIMIT $2

-- name: add_sandbox_spend
-- A built-in tool call's sandbox cost joins the tenant's month spend (with its usage fact,
-- in the ToolCompleted transaction), so the monthly spend cap counts sandbox time too.
UPDATE tenant_budget SET
    spent_micros = CASE WHEN spend_month < date_trunc('month', now())::date
                        THEN $2 ELSE spent_micros + $2 END,
    spend_month = date_trunc('month', now())::date
WHERE tenant_id = $1

-- name: prices_in_force_and_later
-- What a worker's price book holds: each model's version in force now and any scheduled
-- after it (older versions bill nothing new).
SELECT * FROM model_prices p
WHERE p.effective_from > now()
   OR p.effective_from = (SELECT max(q.effective_from) FROM model_prices q
                          WHERE q.model = p.model AND q.effective_from <= now())

-- name: insert_price
-- A new version from $2 (NULL: now). Never in the past: a call already billed must stay
-- billed at the version that was in force. Nothing returned: that version exists already,
-- or $2 is in the past.
WITH v AS (SELECT coalesce($2::timestamptz, now()) AS effective_from)
INSERT INTO model_prices (model, effective_from, input_per_m, cached_input_per_m,
                          cache_write_per_m, output_per_m, per_second_micros)
SELECT $1, v.effective_from, $3, $4, $5, $6, $7 FROM v WHERE v.effective_from >= now()
ON CONFLICT (model, effective_from) DO NOTHING
RETURNING *

-- name: price_at
SELECT * FROM model_prices WHERE model = $1 AND effective_from = $2

-- name: price_history
SELECT * FROM model_prices WHERE model = $1 ORDER BY effective_from DESC LIMIT $2

-- name: prices_in_force_page
SELECT DISTINCT ON (model) * FROM model_prices
WHERE effective_from <= now() AND ($1::text IS NULL OR model > $1)
ORDER BY model, effective_from DESC
LIMIT $2

-- name: insert_activity_usage_fact
-- One activity attempt (ADR 0016): a sandbox usage fact with the attempt's own columns.
INSERT INTO sandbox_usage_facts (tenant_id, run_id, seq, agent_id, agent_version, backend,
                                 sandbox_ms, cost_micros, price_version, attempt, activity,
                                 activity_version, cpu_us, peak_memory_bytes)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)

-- name: reserve_step
-- tenantry_reserve with the tenant set by the function itself: one statement (0029).
-- period_ends as in reserve.
SELECT outcome, wait_seconds, spent, cap,
       date_trunc('month', now()) + interval '1 month' AS period_ends
FROM tenantry_reserve_step($1, $2, $3, $4, $5, $6)
