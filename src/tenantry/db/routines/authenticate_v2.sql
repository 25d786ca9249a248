-- API key -> what it may do: its tenant, its id, its scopes (NULL: every scope, a key made
-- before scopes) and when it expires. Like tenantry_authenticate (which release N-1 still
-- calls), the one cross-tenant read before any tenant is known: a definer function that
-- maps a key hash to these and nothing else. An expired key is returned (its holder is
-- told it expired); a revoked one is not (it looks unknown).

CREATE OR REPLACE FUNCTION tenantry_authenticate_v2(p_key_hash bytea)
RETURNS TABLE (tenant_id text, key_id uuid, scopes text[], expires_at timestamptz)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public AS $$
    SELECT k.tenant_id, k.key_id, k.scopes, k.expires_at FROM public.api_keys k
    WHERE k.key_hash = p_key_hash AND k.revoked_at IS NULL
$$;
REVOKE ALL ON FUNCTION tenantry_authenticate_v2(bytea)
    FROM PUBLIC, tenantry_app, tenantry_console;
GRANT EXECUTE ON FUNCTION tenantry_authenticate_v2(bytea) TO tenantry_app;
