-- A tenant's exports that are due to go (ADR 0044), under the cleanup lease's fence (ADR
-- 0017): finished ones (ready or failed) past their expiry — or, for a tenant being erased,
-- every one, queued and running included. Each archive's object is queued in the blob
-- outbox, which the cleaner drains after the commit. An export being written when its row
-- goes finds its fenced finish refused and deletes its own object (exports/job.py).
-- Returns how many rows went.

CREATE OR REPLACE FUNCTION tenantry_expire_exports(
    p_tenant text, p_owner text, p_epoch bigint, p_all boolean, p_limit integer)
RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public AS $$
DECLARE
    v_gone integer;
BEGIN
    PERFORM 1 FROM public.cleanup_leases l
    WHERE l.tenant_id = p_tenant AND l.owner = p_owner AND l.epoch = p_epoch
      AND l.expires_at > clock_timestamp()
    FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'cleanup lease of tenant % epoch % is no longer held', p_tenant, p_epoch
            USING ERRCODE = 'TR001';
    END IF;
    WITH gone AS (
        DELETE FROM public.exports x WHERE (x.tenant_id, x.export_id) IN (
            SELECT y.tenant_id, y.export_id FROM public.exports y
            WHERE y.tenant_id = p_tenant
              AND (p_all OR (y.status IN ('ready', 'failed')
                             AND y.expires_at < clock_timestamp()))
            LIMIT p_limit)
        RETURNING x.archive_ref
    ), queued AS (
        INSERT INTO public.blob_deletions (tenant_id, ref, run_id)
        SELECT p_tenant, g.archive_ref, NULL FROM gone g WHERE g.archive_ref IS NOT NULL
        ON CONFLICT ON CONSTRAINT blob_deletions_pkey DO NOTHING
    )
    SELECT count(*) INTO v_gone FROM gone;
    RETURN v_gone;
END
$$;
REVOKE ALL ON FUNCTION tenantry_expire_exports(text, text, bigint, boolean, integer)
    FROM PUBLIC, tenantry_app, tenantry_console;
GRANT EXECUTE ON FUNCTION tenantry_expire_exports(text, text, bigint, boolean, integer)
    TO tenantry_app;
