-- May a slot go to this tenant now? Queued work, under its running ceiling, tokens in its
-- bucket, spend under its cap. The fair claims' (runs and activity tasks) one test.

CREATE OR REPLACE FUNCTION tenantry_may_claim(
    l tenant_load, p tenant_policies, b tenant_budget)
RETURNS boolean
LANGUAGE sql STABLE SET search_path = pg_catalog, public AS $$
    SELECT l.queued > 0 AND l.running < p.max_running
       AND (p.tokens_per_minute IS NULL OR public.tenantry_bucket_level(b, p) > 0)
       AND (p.monthly_spend_cap_micros IS NULL
            OR public.tenantry_month_spend(b) < p.monthly_spend_cap_micros)
$$;
