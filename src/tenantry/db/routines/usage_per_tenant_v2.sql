-- The operator's usage report: totals per tenant over a window — model calls, sandbox time
-- and its cost, and the activities' part (ADR 0016) — across tenants, so a definer
-- function that returns sums only. The console role's alone (ADR 0011): the operator routes
-- read it through the console's pool.
--
-- v2 of tenantry_usage_per_tenant: the model calls' sums over the tenant's own accounts
-- (own_*: bring your own key, migration 0050) are new columns (a release before it still
-- calls the first, kept as it was). A fact from before account_owner is its account's,
-- looked up.

CREATE OR REPLACE FUNCTION tenantry_usage_per_tenant_v2(p_from timestamptz, p_to timestamptz)
RETURNS TABLE (tenant_id text, runs bigint, calls bigint, input_tokens numeric,
               cached_input_tokens numeric, output_tokens numeric, cost_micros numeric,
               sandbox_ms numeric, sandbox_cost_micros numeric, activity_attempts bigint,
               activity_sandbox_ms numeric, activity_cpu_us numeric,
               activity_peak_memory_bytes bigint, activity_cost_micros numeric,
               own_calls bigint, own_input_tokens numeric, own_cached_input_tokens numeric,
               own_output_tokens numeric, own_cost_micros numeric)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public AS $$
    WITH facts AS (
        SELECT f.*, coalesce(f.account_owner = 'tenant', EXISTS (
                   SELECT 1 FROM public.model_accounts a
                   WHERE a.account_id = f.account AND a.tenant_id = f.tenant_id)) AS own
        FROM public.usage_facts f
        WHERE f.created_at >= p_from AND f.created_at < p_to
    ), model AS (
        SELECT f.tenant_id, count(*) AS calls, sum(f.input_tokens) AS input_tokens,
               sum(f.cached_input_tokens) AS cached_input_tokens,
               sum(f.output_tokens) AS output_tokens, sum(f.cost_micros) AS cost_micros,
               count(*) FILTER (WHERE f.own) AS own_calls,
               sum(f.input_tokens) FILTER (WHERE f.own) AS own_input_tokens,
               sum(f.cached_input_tokens) FILTER (WHERE f.own) AS own_cached_input_tokens,
               sum(f.output_tokens) FILTER (WHERE f.own) AS own_output_tokens,
               sum(f.cost_micros) FILTER (WHERE f.own) AS own_cost_micros
        FROM facts f
        GROUP BY f.tenant_id
    ), sandbox AS (
        SELECT s.tenant_id, sum(s.sandbox_ms) AS sandbox_ms,
               sum(s.cost_micros) AS sandbox_cost_micros,
               count(*) FILTER (WHERE s.attempt IS NOT NULL) AS activity_attempts,
               sum(s.sandbox_ms) FILTER (WHERE s.attempt IS NOT NULL) AS activity_sandbox_ms,
               sum(s.cpu_us) AS activity_cpu_us,
               max(s.peak_memory_bytes) AS activity_peak_memory_bytes,
               sum(s.cost_micros) FILTER (WHERE s.attempt IS NOT NULL) AS activity_cost_micros
        FROM public.sandbox_usage_facts s
        WHERE s.created_at >= p_from AND s.created_at < p_to
        GROUP BY s.tenant_id
    ), runs AS (
        SELECT u.tenant_id, count(DISTINCT u.run_id) AS runs
        FROM (SELECT f.tenant_id, f.run_id FROM public.usage_facts f
              WHERE f.created_at >= p_from AND f.created_at < p_to
              UNION ALL
              SELECT s.tenant_id, s.run_id FROM public.sandbox_usage_facts s
              WHERE s.created_at >= p_from AND s.created_at < p_to) u
        GROUP BY u.tenant_id
    )
    SELECT r.tenant_id, r.runs, coalesce(m.calls, 0), m.input_tokens, m.cached_input_tokens,
           m.output_tokens, m.cost_micros, s.sandbox_ms, s.sandbox_cost_micros,
           coalesce(s.activity_attempts, 0), s.activity_sandbox_ms, s.activity_cpu_us,
           s.activity_peak_memory_bytes, s.activity_cost_micros,
           coalesce(m.own_calls, 0), m.own_input_tokens, m.own_cached_input_tokens,
           m.own_output_tokens, m.own_cost_micros
    FROM runs r
    LEFT JOIN model m ON m.tenant_id = r.tenant_id
    LEFT JOIN sandbox s ON s.tenant_id = r.tenant_id
    ORDER BY r.tenant_id
$$;
REVOKE ALL ON FUNCTION tenantry_usage_per_tenant_v2(timestamptz, timestamptz)
    FROM PUBLIC, tenantry_app, tenantry_console;
GRANT EXECUTE ON FUNCTION tenantry_usage_per_tenant_v2(timestamptz, timestamptz)
    TO tenantry_console;
