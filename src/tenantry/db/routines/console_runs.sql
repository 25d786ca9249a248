-- The console's runs list (ADR 0006): newest runs of every tenant, or of one tenant, status
-- or agent, as keyset pages on run_id (UUIDv7, creation order). Like every console read
-- across tenants, a definer function that returns only the columns the console shows
-- (never run inputs, answers, secrets or keys), one bounded page at a time; reads of one
-- run go through the tenant's own transaction and RLS. The console role's alone (ADR 0011).

CREATE OR REPLACE FUNCTION tenantry_console_runs(p_tenant text, p_status text, p_agent uuid,
                                                 p_before uuid, p_limit integer)
RETURNS TABLE (tenant_id text, run_id uuid, agent_id uuid, agent_version integer,
               status text, priority text, steps integer, input_tokens bigint,
               output_tokens bigint, cost_micros bigint, cancel_requested boolean,
               created_at timestamptz, updated_at timestamptz, finished_at timestamptz)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public AS $$
    SELECT r.tenant_id, r.run_id, r.agent_id, r.agent_version, r.status, r.priority,
           r.steps, r.input_tokens, r.output_tokens, r.cost_micros, r.cancel_requested,
           r.created_at, r.updated_at, r.finished_at
    FROM public.runs r
    WHERE (p_tenant IS NULL OR r.tenant_id = p_tenant)
      AND (p_status IS NULL OR r.status = p_status)
      AND (p_agent IS NULL OR r.agent_id = p_agent)
      AND (p_before IS NULL OR r.run_id < p_before)
      AND r.kind = 'agent'
    ORDER BY r.run_id DESC
    LIMIT least(greatest(p_limit, 1), 200)
$$;
REVOKE ALL ON FUNCTION tenantry_console_runs(text, text, uuid, uuid, integer)
    FROM PUBLIC, tenantry_app, tenantry_console;
GRANT EXECUTE ON FUNCTION tenantry_console_runs(text, text, uuid, uuid, integer)
    TO tenantry_console;
