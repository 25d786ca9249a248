-- A blob's row before its object (issue 40, ADR 0042; blobs/store.py): one round trip on the
-- write path of every large tool output, sandbox save and screenshot. Runs as the caller,
-- with the tenant set first, so row-level security checks every row it touches.
--
-- The tenant's usage row is locked to the commit: one tenant's writers take turns, and
-- none can overshoot the quota with another (p_quota NULL: none). A ref already here (a
-- retried write of the same content) is counted once. (stored, used): stored false means
-- the write would pass the quota, and nothing was added; used is the tenant's bytes.

CREATE OR REPLACE FUNCTION tenantry_add_blob(
    p_tenant text, p_ref text, p_run uuid, p_kind text, p_bytes bigint, p_quota bigint)
RETURNS TABLE (stored boolean, used bigint)
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, public AS $$
DECLARE
    v_used bigint;
BEGIN
    PERFORM set_config('tenantry.tenant_id', p_tenant, true);
    INSERT INTO public.blob_usage AS u (tenant_id) VALUES (p_tenant)
    ON CONFLICT (tenant_id) DO UPDATE SET bytes = u.bytes
    RETURNING u.bytes INTO v_used;
    IF EXISTS (SELECT 1 FROM public.blobs b WHERE b.tenant_id = p_tenant AND b.ref = p_ref)
    THEN
        RETURN QUERY SELECT true, v_used;
        RETURN;
    END IF;
    IF p_quota IS NOT NULL AND v_used + p_bytes > p_quota THEN
        RETURN QUERY SELECT false, v_used;
        RETURN;
    END IF;
    INSERT INTO public.blobs (tenant_id, ref, run_id, kind, bytes)
    VALUES (p_tenant, p_ref, p_run, p_kind, p_bytes)
    ON CONFLICT (tenant_id, ref) DO NOTHING;
    IF FOUND THEN
        UPDATE public.blob_usage u SET bytes = u.bytes + p_bytes WHERE u.tenant_id = p_tenant;
        v_used := v_used + p_bytes;
    END IF;
    RETURN QUERY SELECT true, v_used;
END
$$;
REVOKE ALL ON FUNCTION tenantry_add_blob(text, text, uuid, text, bigint, bigint)
    FROM PUBLIC, tenantry_app, tenantry_console;
GRANT EXECUTE ON FUNCTION tenantry_add_blob(text, text, uuid, text, bigint, bigint)
    TO tenantry_app;
