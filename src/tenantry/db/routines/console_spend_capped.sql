-- The console's tenants page shows, beside each listed tenant's waiting runs, how many wait
-- for its monthly spend cap (ADR 0035): a read across tenants, so (like
-- tenantry_console_flagged_versions) a function of the console role's alone.

CREATE OR REPLACE FUNCTION tenantry_console_spend_capped(p_tenants text[])
RETURNS TABLE (tenant_id text, runs bigint)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public AS $$
    SELECT r.tenant_id, count(*) FROM public.runs r
    WHERE r.tenant_id = ANY (p_tenants) AND r.status = 'waiting'
      AND r.waiting_cap_micros IS NOT NULL
    GROUP BY r.tenant_id
$$;
REVOKE ALL ON FUNCTION tenantry_console_spend_capped(text[])
    FROM PUBLIC, tenantry_app, tenantry_console;
GRANT EXECUTE ON FUNCTION tenantry_console_spend_capped(text[]) TO tenantry_console;
