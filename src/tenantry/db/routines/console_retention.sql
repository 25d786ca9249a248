-- The console's tenants page shows each tenant's retention beside its policy (ADR 0017): a
-- read across tenants, so (like tenantry_console_flagged_versions) a function of the
-- console role's alone. runs_days NULL: the tenant never had a policy set (the defaults
-- hold); tombstones_days NULL: kept forever.

CREATE OR REPLACE FUNCTION tenantry_console_retention(p_tenants text[])
RETURNS TABLE (tenant_id text, runs_days integer, tombstones_days integer,
               erased_at timestamptz)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public AS $$
    SELECT t.tenant_id, p.runs_days, p.tombstones_days, t.erased_at
    FROM public.tenants t
    LEFT JOIN public.retention_policies p ON p.tenant_id = t.tenant_id
    WHERE t.tenant_id = ANY (p_tenants)
$$;
REVOKE ALL ON FUNCTION tenantry_console_retention(text[])
    FROM PUBLIC, tenantry_app, tenantry_console;
GRANT EXECUTE ON FUNCTION tenantry_console_retention(text[]) TO tenantry_console;
