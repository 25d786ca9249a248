-- The operator console's tenants page shows each listed tenant's agent versions flagged for
-- review (refused egress, agents/flags.py): a read across tenants, like tenantry_console_tenants,
-- so through a function of its own, the console role's alone.

CREATE OR REPLACE FUNCTION tenantry_console_flagged_versions(p_tenants text[])
RETURNS TABLE (tenant_id text, agent_id uuid, name text, version integer,
               refused_egress bigint, reason text, flagged_at timestamptz)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public AS $$
    SELECT f.tenant_id, f.agent_id, a.name, f.version, f.refused_egress, f.reason,
           f.flagged_at
    FROM public.agent_version_flags f
    JOIN public.agents a ON a.tenant_id = f.tenant_id AND a.agent_id = f.agent_id
    WHERE f.tenant_id = ANY (p_tenants) AND f.flagged_at IS NOT NULL
    ORDER BY f.tenant_id, f.flagged_at DESC
$$;
REVOKE ALL ON FUNCTION tenantry_console_flagged_versions(text[])
    FROM PUBLIC, tenantry_app, tenantry_console;
GRANT EXECUTE ON FUNCTION tenantry_console_flagged_versions(text[]) TO tenantry_console;
