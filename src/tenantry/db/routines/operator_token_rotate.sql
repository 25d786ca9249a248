-- Rotate the operator token live (ADR 0043 §9): the new token's hash is stored, and every
-- other token in force ends after p_overlap_seconds (never later than it would have), so
-- automation and browsers move over without an outage. Answers when the others end.

CREATE OR REPLACE FUNCTION tenantry_operator_token_rotate(p_new_hash bytea,
                                                          p_overlap_seconds integer,
                                                          p_by text)
RETURNS timestamptz
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, public AS $$
DECLARE
    v_end timestamptz := now() + make_interval(secs => greatest(p_overlap_seconds, 0));
BEGIN
    PERFORM pg_advisory_xact_lock(hashtext('tenantry_operator_token_seed'));
    UPDATE public.operator_tokens t SET expires_at = least(coalesce(t.expires_at, v_end), v_end)
    WHERE t.expires_at IS NULL OR t.expires_at > now();
    INSERT INTO public.operator_tokens (token_hash, created_by) VALUES (p_new_hash, p_by);
    RETURN v_end;
END
$$;
REVOKE ALL ON FUNCTION tenantry_operator_token_rotate(bytea, integer, text)
    FROM PUBLIC, tenantry_app, tenantry_console;
GRANT EXECUTE ON FUNCTION tenantry_operator_token_rotate(bytea, integer, text)
    TO tenantry_app;
