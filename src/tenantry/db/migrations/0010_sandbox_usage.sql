-- Sandbox time in the billing record (DESIGN §7b: tenants pay per token and per sandbox
-- second). One immutable fact per built-in tool call that used the run's sandbox, written
-- with its ToolCompleted in the same transaction: the time the call spent executing in the
-- sandbox (exec_ms), never starting or idle time — a waiting run's sandbox is paused or gone.
CREATE TABLE sandbox_usage_facts (
    tenant_id       text NOT NULL REFERENCES tenants (tenant_id),
    run_id          uuid NOT NULL,
    seq             integer NOT NULL,  -- the ToolCompleted it records
    agent_id        uuid NOT NULL,
    agent_version   integer NOT NULL,
    backend         text NOT NULL,
    sandbox_ms      bigint NOT NULL CHECK (sandbox_ms >= 0),
    created_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, run_id, seq),
    FOREIGN KEY (tenant_id, run_id, seq) REFERENCES run_events (tenant_id, run_id, seq)
);
CREATE INDEX sandbox_usage_facts_by_time ON sandbox_usage_facts (tenant_id, created_at);
CREATE TRIGGER sandbox_usage_facts_immutable
    BEFORE UPDATE OR DELETE ON sandbox_usage_facts
    FOR EACH ROW EXECUTE FUNCTION tenantry_refuse_change();
ALTER TABLE sandbox_usage_facts ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON sandbox_usage_facts
    USING (tenant_id = tenantry_current_tenant());
GRANT SELECT, INSERT ON sandbox_usage_facts TO tenantry_app;

-- The operator's per-tenant report gains the sandbox time (a new result column: the
-- function is replaced, not altered).
DROP FUNCTION tenantry_usage_per_tenant(timestamptz, timestamptz);
CREATE FUNCTION tenantry_usage_per_tenant(p_from timestamptz, p_to timestamptz)
RETURNS TABLE (tenant_id text, runs bigint, calls bigint, input_tokens numeric,
               cached_input_tokens numeric, output_tokens numeric, cost_micros numeric,
               sandbox_ms numeric)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public AS $$
    WITH model AS (
        SELECT f.tenant_id, count(*) AS calls, sum(f.input_tokens) AS input_tokens,
               sum(f.cached_input_tokens) AS cached_input_tokens,
               sum(f.output_tokens) AS output_tokens, sum(f.cost_micros) AS cost_micros
        FROM public.usage_facts f
        WHERE f.created_at >= p_from AND f.created_at < p_to
        GROUP BY f.tenant_id
    ), sandbox AS (
        SELECT s.tenant_id, sum(s.sandbox_ms) AS sandbox_ms
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
           m.output_tokens, m.cost_micros, s.sandbox_ms
    FROM runs r
    LEFT JOIN model m ON m.tenant_id = r.tenant_id
    LEFT JOIN sandbox s ON s.tenant_id = r.tenant_id
    ORDER BY r.tenant_id
$$;
REVOKE ALL ON FUNCTION tenantry_usage_per_tenant(timestamptz, timestamptz) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION tenantry_usage_per_tenant(timestamptz, timestamptz) TO tenantry_app;
