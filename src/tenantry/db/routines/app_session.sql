-- A tenant console cookie -> who is signed in (ADR 0043 §6). Like tenantry_authenticate_v2
-- for keys: the one read before the tenant is known, mapping the session id's hash to its
-- tenant, user and role and nothing else. A revoked or expired session, one whose user was
-- disabled, or one of an erased tenant (ADR 0017), answers no row.

CREATE OR REPLACE FUNCTION tenantry_app_session(p_session_hash bytea)
RETURNS TABLE (tenant_id text, user_id uuid, email text, role text, expires_at timestamptz)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public AS $$
    SELECT s.tenant_id, s.user_id, u.email, u.role, s.expires_at
    FROM public.app_sessions s
    JOIN public.tenant_users u ON u.tenant_id = s.tenant_id AND u.user_id = s.user_id
    JOIN public.tenants t ON t.tenant_id = s.tenant_id
    WHERE s.session_hash = p_session_hash AND s.revoked_at IS NULL AND s.expires_at > now()
      AND u.disabled_at IS NULL AND t.erased_at IS NULL
$$;
REVOKE ALL ON FUNCTION tenantry_app_session(bytea) FROM PUBLIC, tenantry_app, tenantry_console;
GRANT EXECUTE ON FUNCTION tenantry_app_session(bytea) TO tenantry_app;
