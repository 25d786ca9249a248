-- An OpenID Connect identity -> a tenant console session (ADR 0043 §5). Like
-- tenantry_app_sign_in, a definer function: the person's tenant is not known before their
-- address is looked up.
--
-- The users it may sign in as: enabled users, of tenants not erased, with the verified
-- address (compared lower-cased), not bound to another identity, of p_tenant when given.
-- Exactly one: it is bound to (p_issuer, p_subject) if it was not yet, a session is stored,
-- and one row comes back with signed_in true. Several (a person in more than one tenant):
-- they come back with signed_in false, nothing stored, for the person to choose from. None:
-- no row.

CREATE OR REPLACE FUNCTION tenantry_app_sign_in_oidc(p_issuer text, p_subject text,
                                                     p_email text, p_tenant text,
                                                     p_session_hash bytea,
                                                     p_session_seconds integer)
RETURNS TABLE (tenant_id text, user_id uuid, signed_in boolean)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, public AS $$
DECLARE
    v_tenants text[];
    v_users uuid[];
BEGIN
    SELECT array_agg(u.tenant_id ORDER BY u.tenant_id), array_agg(u.user_id ORDER BY u.tenant_id)
    INTO v_tenants, v_users
    FROM public.tenant_users u JOIN public.tenants t ON t.tenant_id = u.tenant_id
    WHERE lower(u.email) = lower(p_email) AND u.disabled_at IS NULL AND t.erased_at IS NULL
      AND (u.oidc_subject IS NULL OR (u.oidc_issuer = p_issuer AND u.oidc_subject = p_subject))
      AND (p_tenant IS NULL OR u.tenant_id = p_tenant);
    IF coalesce(cardinality(v_users), 0) <> 1 THEN
        RETURN QUERY SELECT c.tenant_id, c.user_id, false
                     FROM unnest(v_tenants, v_users) AS c (tenant_id, user_id) LIMIT 50;
        RETURN;
    END IF;
    -- The one user, still as found (a change since is no sign-in), bound and signed in.
    RETURN QUERY
    WITH bound AS (
        UPDATE public.tenant_users u
        SET oidc_issuer = p_issuer, oidc_subject = p_subject
        WHERE u.tenant_id = v_tenants[1] AND u.user_id = v_users[1]
          AND u.disabled_at IS NULL
          AND (u.oidc_subject IS NULL
               OR (u.oidc_issuer = p_issuer AND u.oidc_subject = p_subject))
        RETURNING u.tenant_id, u.user_id
    ), made AS (
        INSERT INTO public.app_sessions (tenant_id, session_hash, user_id, expires_at)
        SELECT bound.tenant_id, p_session_hash, bound.user_id,
               now() + make_interval(secs => least(greatest(p_session_seconds, 60), 86400))
        FROM bound
        RETURNING app_sessions.tenant_id, app_sessions.user_id
    )
    SELECT made.tenant_id, made.user_id, true FROM made;
END
$$;
REVOKE ALL ON FUNCTION tenantry_app_sign_in_oidc(text, text, text, text, bytea, integer)
    FROM PUBLIC, tenantry_app, tenantry_console;
GRANT EXECUTE ON FUNCTION tenantry_app_sign_in_oidc(text, text, text, text, bytea, integer)
    TO tenantry_app;
