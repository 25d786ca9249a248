-- The tenants whose turn it is for a retention pass (ADR 0017): every tenant whose cleanup
-- lease is free, least recently cleaned first (an erased tenant's at once). A pass over a
-- tenant with nothing to delete is one index probe. Never a tenant being moved to another
-- cell: its rows stay as they are until the move ends.

CREATE OR REPLACE FUNCTION tenantry_cleanup_due(
    p_every_seconds double precision, p_limit integer)
RETURNS TABLE (tenant_id text)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public AS $$
    SELECT t.tenant_id FROM public.tenants t
    LEFT JOIN public.cleanup_leases l ON l.tenant_id = t.tenant_id
    WHERE t.tenant_id <> ALL (public.tenantry_frozen_tenants())
      AND (l.expires_at IS NULL OR l.expires_at < clock_timestamp())
      AND (l.last_pass_at IS NULL
           OR l.last_pass_at < clock_timestamp() - make_interval(secs => p_every_seconds)
           OR t.erased_at IS NOT NULL)
    ORDER BY l.last_pass_at NULLS FIRST, t.tenant_id
    LIMIT p_limit
$$;
REVOKE ALL ON FUNCTION tenantry_cleanup_due(double precision, integer)
    FROM PUBLIC, tenantry_app, tenantry_console;
GRANT EXECUTE ON FUNCTION tenantry_cleanup_due(double precision, integer) TO tenantry_app;
