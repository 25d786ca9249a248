-- The operator console (docs/decisions/0006-operator-console.md): its cross-tenant reads.
-- Like the operator usage report, each is a definer function that returns only the
-- columns the console shows (never run inputs, answers, secrets or keys), one bounded
-- page at a time. Reads of one run go through the tenant's own transaction and RLS.

-- Newest runs of every tenant: keyset pages on run_id (UUIDv7, creation order).
CREATE INDEX runs_console_recent ON runs (run_id);
CREATE INDEX runs_console_by_status ON runs (status, run_id);
-- The inbox across tenants, oldest request first (approval ids are UUIDv7 too).
CREATE INDEX approvals_console_pending ON approvals (approval_id) WHERE status = 'pending';

CREATE FUNCTION tenantry_console_runs(p_tenant text, p_status text, p_agent uuid,
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
REVOKE ALL ON FUNCTION tenantry_console_runs(text, text, uuid, uuid, integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION tenantry_console_runs(text, text, uuid, uuid, integer)
    TO tenantry_app;

-- Pending approvals of every tenant, oldest first, with the exact call awaiting a person.
CREATE FUNCTION tenantry_console_pending_approvals(p_after uuid, p_limit integer)
RETURNS TABLE (tenant_id text, approval_id uuid, run_id uuid, key text, tool text,
               arguments jsonb, requested_at timestamptz, expires_at timestamptz)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public AS $$
    SELECT a.tenant_id, a.approval_id, a.run_id, a.key, a.tool, a.arguments,
           a.requested_at, a.expires_at
    FROM public.approvals a
    WHERE a.status = 'pending' AND (p_after IS NULL OR a.approval_id > p_after)
    ORDER BY a.approval_id
    LIMIT least(greatest(p_limit, 1), 200)
$$;
REVOKE ALL ON FUNCTION tenantry_console_pending_approvals(uuid, integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION tenantry_console_pending_approvals(uuid, integer) TO tenantry_app;

-- Tenants with their policy and what they hold now: the same projections admission and
-- the fair claim read (tenant_load, tenant_budget), so the page shows what they decide on.
CREATE FUNCTION tenantry_console_tenants(p_after text, p_limit integer)
RETURNS TABLE (tenant_id text, name text, plan text, region text,
               approval_ttl_seconds integer, weight integer, max_running integer,
               max_queued integer, tokens_per_minute bigint,
               monthly_spend_cap_micros bigint, policy_updated_at timestamptz,
               queued integer, running integer, waiting integer,
               month_spend_micros bigint, reserved_micros bigint,
               bucket_tokens double precision, pending_approvals bigint)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public AS $$
    SELECT t.tenant_id, t.name, t.plan, t.region, t.approval_ttl_seconds, p.weight,
           p.max_running, p.max_queued, p.tokens_per_minute, p.monthly_spend_cap_micros,
           p.updated_at, l.queued, l.running, l.waiting, public.tenantry_month_spend(b),
           b.reserved_micros, public.tenantry_bucket_level(b, p),
           (SELECT count(*) FROM public.approvals a
            WHERE a.tenant_id = t.tenant_id AND a.status = 'pending')
    FROM public.tenants t
    JOIN public.tenant_policies p ON p.tenant_id = t.tenant_id
    JOIN public.tenant_load l ON l.tenant_id = t.tenant_id
    JOIN public.tenant_budget b ON b.tenant_id = t.tenant_id
    WHERE p_after IS NULL OR t.tenant_id > p_after
    ORDER BY t.tenant_id
    LIMIT least(greatest(p_limit, 1), 200)
$$;
REVOKE ALL ON FUNCTION tenantry_console_tenants(text, integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION tenantry_console_tenants(text, integer) TO tenantry_app;
