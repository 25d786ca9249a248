-- The next export to work on, across tenants (ADR 0044): a queued one, or a running one
-- whose lease lapsed (its process died or stalled), oldest first; none of a tenant being
-- erased (its exports go with the erase) or moved to another cell. The claim bumps the
-- epoch and names this attempt's archive by it (`export_<id>.<epoch>.tar.gz`), queueing
-- the previous attempt's object for deletion: whatever a dead attempt wrote never becomes
-- the archive, and its object is not left behind. An export past p_max_attempts claims is
-- failed instead, its error kept, and kept p_keep_days as a finished one is. Returns at
-- most one row; ids and epochs only.

CREATE OR REPLACE FUNCTION tenantry_claim_export(
    p_owner text, p_seconds double precision, p_max_attempts integer, p_keep_days integer)
RETURNS TABLE (tenant_id text, export_id uuid, epoch bigint, archive_ref text)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public AS $$
DECLARE
    v_tenant text;
    v_export uuid;
    v_attempts integer;
    v_old_ref text;
    v_epoch bigint;
    v_ref text;
BEGIN
    LOOP
        SELECT x.tenant_id, x.export_id, x.attempts, x.archive_ref
        INTO v_tenant, v_export, v_attempts, v_old_ref
        FROM public.exports x
        JOIN public.tenants t ON t.tenant_id = x.tenant_id
        WHERE (x.status = 'queued'
               OR (x.status = 'running' AND x.lease_expires_at < clock_timestamp()))
          AND t.erased_at IS NULL
          AND x.tenant_id <> ALL (public.tenantry_frozen_tenants())
        ORDER BY x.created_at
        LIMIT 1
        FOR UPDATE OF x SKIP LOCKED;
        IF NOT FOUND THEN
            RETURN;
        END IF;
        IF v_old_ref IS NOT NULL THEN
            INSERT INTO public.blob_deletions (tenant_id, ref, run_id)
            VALUES (v_tenant, v_old_ref, NULL)
            ON CONFLICT ON CONSTRAINT blob_deletions_pkey DO NOTHING;
        END IF;
        IF v_attempts >= p_max_attempts THEN
            UPDATE public.exports x
            SET status = 'failed', lease_owner = NULL, lease_expires_at = NULL,
                archive_ref = NULL, finished_at = clock_timestamp(),
                expires_at = clock_timestamp() + make_interval(days => p_keep_days),
                error = left('gave up after ' || v_attempts || ' attempts'
                             || coalesce(': ' || x.error, ''), 500)
            WHERE x.tenant_id = v_tenant AND x.export_id = v_export;
            CONTINUE;
        END IF;
        UPDATE public.exports x
        SET status = 'running', lease_owner = p_owner, lease_epoch = x.lease_epoch + 1,
            lease_expires_at = clock_timestamp() + make_interval(secs => p_seconds),
            attempts = x.attempts + 1, started_at = coalesce(x.started_at, clock_timestamp()),
            archive_ref = 'export_' || replace(x.export_id::text, '-', '') || '.'
                          || (x.lease_epoch + 1) || '.tar.gz'
        WHERE x.tenant_id = v_tenant AND x.export_id = v_export
        RETURNING x.lease_epoch, x.archive_ref INTO v_epoch, v_ref;
        RETURN QUERY SELECT v_tenant, v_export, v_epoch, v_ref;
        RETURN;
    END LOOP;
END
$$;
REVOKE ALL ON FUNCTION tenantry_claim_export(text, double precision, integer, integer)
    FROM PUBLIC, tenantry_app, tenantry_console;
GRANT EXECUTE ON FUNCTION tenantry_claim_export(text, double precision, integer, integer)
    TO tenantry_app;
