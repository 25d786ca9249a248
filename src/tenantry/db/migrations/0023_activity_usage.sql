-- Activity attempts in the billing record (ADR 0016, issue 16 item 9). An attempt's fact is
-- a sandbox usage fact (0010): the same table, the same immutability and row-level
-- security, priced per sandbox second at the same `sandbox` price (0014) and counted in the
-- tenant's month spend like a built-in tool call's. Its row names the ActivityAttempted
-- event it records (seq), and adds what only an attempt has: its number, the activity's
-- name and version, and what its sandbox used as the host measured it — CPU time and the
-- peak memory charged. Tool-call facts leave these NULL; so does an attempt whose backend
-- could not measure a figure (never a made-up 0).
ALTER TABLE sandbox_usage_facts
    ADD COLUMN attempt            integer CHECK (attempt >= 1),
    ADD COLUMN activity           text,
    ADD COLUMN activity_version   integer CHECK (activity_version >= 1),
    ADD COLUMN cpu_us             bigint CHECK (cpu_us >= 0),
    ADD COLUMN peak_memory_bytes  bigint CHECK (peak_memory_bytes >= 0),
    ADD CONSTRAINT sandbox_usage_facts_activity_whole
        CHECK ((attempt IS NULL) = (activity IS NULL)
               AND (attempt IS NULL) = (activity_version IS NULL)
               AND (attempt IS NOT NULL OR (cpu_us IS NULL AND peak_memory_bytes IS NULL)));

-- The operator's per-tenant report gains the activities' part (new result columns: the
-- function is replaced, not altered; still the console role's alone, as 0019 made it).
DROP FUNCTION tenantry_usage_per_tenant(timestamptz, timestamptz);
CREATE FUNCTION tenantry_usage_per_tenant(p_from timestamptz, p_to timestamptz)
RETURNS TABLE (tenant_id text, runs bigint, calls bigint, input_tokens numeric,
               cached_input_tokens numeric, output_tokens numeric, cost_micros numeric,
               sandbox_ms numeric, sandbox_cost_micros numeric, activity_attempts bigint,
               activity_sandbox_ms numeric, activity_cpu_us numeric,
               activity_peak_memory_bytes bigint, activity_cost_micros numeric)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public AS $$
    WITH model AS (
        SELECT f.tenant_id, count(*) AS calls, sum(f.input_tokens) AS input_tokens,
               sum(f.cached_input_tokens) AS cached_input_tokens,
               sum(f.output_tokens) AS output_tokens, sum(f.cost_micros) AS cost_micros
        FROM public.usage_facts f
        WHERE f.created_at >= p_from AND f.created_at < p_to
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
           s.activity_peak_memory_bytes, s.activity_cost_micros
    FROM runs r
    LEFT JOIN model m ON m.tenant_id = r.tenant_id
    LEFT JOIN sandbox s ON s.tenant_id = r.tenant_id
    ORDER BY r.tenant_id
$$;
REVOKE ALL ON FUNCTION tenantry_usage_per_tenant(timestamptz, timestamptz) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION tenantry_usage_per_tenant(timestamptz, timestamptz)
    TO tenantry_console;
