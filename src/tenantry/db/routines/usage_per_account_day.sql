-- Billing reconciliation (ADR 0007): one provider account's usage per UTC day over
-- [p_from, p_to), across tenants — the provider bills an account across all our tenants.
-- A definer function like the operator usage report: sums only, never a tenant's runs or
-- content.

CREATE OR REPLACE FUNCTION tenantry_usage_per_account_day(p_account text, p_from timestamptz,
                                                          p_to timestamptz)
RETURNS TABLE (day date, calls bigint, input_tokens numeric, cached_input_tokens numeric,
               cache_write_input_tokens numeric, output_tokens numeric, cost_micros numeric)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public AS $$
    SELECT (f.created_at AT TIME ZONE 'UTC')::date, count(*), sum(f.input_tokens),
           sum(f.cached_input_tokens), sum(f.cache_write_input_tokens), sum(f.output_tokens),
           sum(f.cost_micros)
    FROM public.usage_facts f
    WHERE f.account = p_account AND f.created_at >= p_from AND f.created_at < p_to
    GROUP BY 1 ORDER BY 1
$$;
REVOKE ALL ON FUNCTION tenantry_usage_per_account_day(text, timestamptz, timestamptz)
    FROM PUBLIC, tenantry_app, tenantry_console;
GRANT EXECUTE ON FUNCTION tenantry_usage_per_account_day(text, timestamptz, timestamptz)
    TO tenantry_app;
