-- A process starts with its configured operator token (ADR 0043 §9). Known already (a
-- replica, a restart, a token a rotation made): nothing changes, even if a rotation has
-- ended it — a retired token does not come back by being configured. Unknown: it is a new
-- token the operator chose by configuration, as changing TENANTRY_OPERATOR_TOKEN always
-- was, so it becomes the only one in force (the others end now). Answers whether the
-- configured token is in force.

CREATE OR REPLACE FUNCTION tenantry_operator_token_seed(p_hash bytea)
RETURNS boolean
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, public AS $$
BEGIN
    -- One seed at a time: two replicas starting with a new token agree on the outcome.
    PERFORM pg_advisory_xact_lock(hashtext('tenantry_operator_token_seed'));
    IF NOT EXISTS (SELECT 1 FROM public.operator_tokens t WHERE t.token_hash = p_hash) THEN
        UPDATE public.operator_tokens t SET expires_at = now()
        WHERE t.expires_at IS NULL OR t.expires_at > now();
        INSERT INTO public.operator_tokens (token_hash, created_by)
        VALUES (p_hash, 'configuration');
    END IF;
    RETURN EXISTS (SELECT 1 FROM public.operator_tokens t
                   WHERE t.token_hash = p_hash
                     AND (t.expires_at IS NULL OR t.expires_at > now()));
END
$$;
REVOKE ALL ON FUNCTION tenantry_operator_token_seed(bytea)
    FROM PUBLIC, tenantry_app, tenantry_console;
GRANT EXECUTE ON FUNCTION tenantry_operator_token_seed(bytea) TO tenantry_app;
