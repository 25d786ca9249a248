-- The operator API's list of tenants (GET /admin/v1/tenants). The tenants table is under
-- row-level security and the application role sees no tenant's row without a tenant set,
-- so this cross-tenant read is a definer function, like the console's: a bounded keyset
-- page of exactly the fields the create route returns (never the webhook secret). A
-- tenant's own resources (keys, secrets, tool servers) are listed inside that tenant's
-- transaction, where row-level security checks them as every tenant read.
--
-- The console role's alone (ADR 0011): were the tenant pool's role able to call it, any
-- statement on a tenant connection could page through every tenant's name. The operator
-- routes read it through the console's pool (Platform.cross_tenant_db).

CREATE OR REPLACE FUNCTION tenantry_admin_tenants(p_after text, p_limit integer)
RETURNS TABLE (tenant_id text, name text, region text, plan text, home_cell text,
               created_at timestamptz)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public AS $$
    SELECT t.tenant_id, t.name, t.region, t.plan, t.home_cell, t.created_at
    FROM public.tenants t
    WHERE p_after IS NULL OR t.tenant_id > p_after
    ORDER BY t.tenant_id
    LIMIT least(greatest(p_limit, 1), 200)
$$;
REVOKE ALL ON FUNCTION tenantry_admin_tenants(text, integer)
    FROM PUBLIC, tenantry_app, tenantry_console;
GRANT EXECUTE ON FUNCTION tenantry_admin_tenants(text, integer) TO tenantry_console;
