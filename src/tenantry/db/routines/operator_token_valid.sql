-- Is this the hash of an operator token in force (ADR 0043 §9)? The one read of the table
-- an API process makes per (uncached) /admin/v1 request or console login: a definer
-- function answering until when (NULL: no end yet) for a token in force, no row otherwise.

CREATE OR REPLACE FUNCTION tenantry_operator_token_valid(p_hash bytea)
RETURNS TABLE (expires_at timestamptz)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public AS $$
    SELECT t.expires_at FROM public.operator_tokens t
    WHERE t.token_hash = p_hash AND (t.expires_at IS NULL OR t.expires_at > now())
$$;
REVOKE ALL ON FUNCTION tenantry_operator_token_valid(bytea)
    FROM PUBLIC, tenantry_app, tenantry_console;
GRANT EXECUTE ON FUNCTION tenantry_operator_token_valid(bytea) TO tenantry_app;
