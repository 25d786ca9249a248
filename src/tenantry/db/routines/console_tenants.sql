-- The console's tenants page (ADR 0006): tenants with their policy and what they hold now,
-- from the same projections admission and the fair claim read (tenant_load, tenant_budget),
-- so the page shows what they decide on — the reservations and bucket as they are once
-- folded (tenantry_budget_now, ADR 0024). The console role's alone (ADR 0011).

CREATE OR REPLACE FUNCTION tenantry_console_tenants(p_after text, p_limit integer)
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
           (public.tenantry_budget_now(b)).reserved_micros,
           public.tenantry_bucket_level(public.tenantry_budget_now(b), p),
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
REVOKE ALL ON FUNCTION tenantry_console_tenants(text, integer)
    FROM PUBLIC, tenantry_app, tenantry_console;
GRANT EXECUTE ON FUNCTION tenantry_console_tenants(text, integer) TO tenantry_console;
