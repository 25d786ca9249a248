-- API key -> tenant. Authentication happens before any tenant is known, so this is the one
-- cross-tenant read the application may make: a definer function (owned by the migrating
-- role) that maps a key hash to its tenant and nothing else.

CREATE OR REPLACE FUNCTION tenantry_authenticate(p_key_hash bytea) RETURNS text
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public AS $$
    SELECT tenant_id FROM public.api_keys
    WHERE key_hash = p_key_hash AND revoked_at IS NULL
$$;
REVOKE ALL ON FUNCTION tenantry_authenticate(bytea)
    FROM PUBLIC, tenantry_app, tenantry_console;
GRANT EXECUTE ON FUNCTION tenantry_authenticate(bytea) TO tenantry_app;
