-- The operator API's cross-tenant reads are the console role's too (ADR 0011): the list of
-- tenants (0011) and the usage of every tenant (0014) were executable by tenantry_app, so
-- any statement on a tenant connection could page through every tenant's name and spend
-- without leaving its role. The operator routes read them through the console's pool
-- (Platform.cross_tenant_db), whose login alone may become tenantry_console.
REVOKE EXECUTE ON FUNCTION tenantry_admin_tenants(text, integer) FROM tenantry_app;
GRANT EXECUTE ON FUNCTION tenantry_admin_tenants(text, integer) TO tenantry_console;
REVOKE EXECUTE ON FUNCTION tenantry_usage_per_tenant(timestamptz, timestamptz)
    FROM tenantry_app;
GRANT EXECUTE ON FUNCTION tenantry_usage_per_tenant(timestamptz, timestamptz)
    TO tenantry_console;
