-- A blob deletion carried out (p_error NULL: its row goes) or failed (the error is kept
-- for the operator; the row comes back when its claim lapses). Retention, ADR 0017.

CREATE OR REPLACE FUNCTION tenantry_blob_deleted(p_tenant text, p_ref text, p_error text)
RETURNS void
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, public AS $$
    DELETE FROM public.blob_deletions WHERE tenant_id = p_tenant AND ref = p_ref
      AND p_error IS NULL;
    UPDATE public.blob_deletions SET last_error = p_error
    WHERE tenant_id = p_tenant AND ref = p_ref AND p_error IS NOT NULL;
$$;
REVOKE ALL ON FUNCTION tenantry_blob_deleted(text, text, text)
    FROM PUBLIC, tenantry_app, tenantry_console;
GRANT EXECUTE ON FUNCTION tenantry_blob_deleted(text, text, text) TO tenantry_app;
