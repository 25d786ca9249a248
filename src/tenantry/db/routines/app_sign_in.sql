-- A one-time sign-in link -> a tenant console session (ADR 0043 §5-6). The link's tenant
-- is not known before it is looked up, so this is a definer function: it takes the link's
-- hash and the new session's, and in one statement marks the link used (unused, unexpired,
-- its user not disabled, its tenant not erased: otherwise nothing happens and no row comes
-- back) and stores the session. It answers only whose session it is.

CREATE OR REPLACE FUNCTION tenantry_app_sign_in(p_link_hash bytea, p_session_hash bytea,
                                                p_session_seconds integer)
RETURNS TABLE (tenant_id text, user_id uuid)
LANGUAGE sql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, public AS $$
    WITH used AS (
        UPDATE public.sign_in_links l SET used_at = now()
        WHERE l.link_hash = p_link_hash AND l.used_at IS NULL AND l.expires_at > now()
          AND EXISTS (SELECT 1 FROM public.tenant_users u
                      JOIN public.tenants t ON t.tenant_id = u.tenant_id
                      WHERE u.tenant_id = l.tenant_id AND u.user_id = l.user_id
                        AND u.disabled_at IS NULL AND t.erased_at IS NULL)
        RETURNING l.tenant_id, l.user_id
    ), made AS (
        INSERT INTO public.app_sessions (tenant_id, session_hash, user_id, expires_at)
        SELECT used.tenant_id, p_session_hash, used.user_id,
               now() + make_interval(secs => least(greatest(p_session_seconds, 60), 86400))
        FROM used
        RETURNING app_sessions.tenant_id, app_sessions.user_id
    )
    SELECT made.tenant_id, made.user_id FROM made
$$;
REVOKE ALL ON FUNCTION tenantry_app_sign_in(bytea, bytea, integer)
    FROM PUBLIC, tenantry_app, tenantry_console;
GRANT EXECUTE ON FUNCTION tenantry_app_sign_in(bytea, bytea, integer) TO tenantry_app;
