-- Blob deletions due, claimed for a while (a crashed deleter's rows come back), across
-- tenants; none of a tenant being moved to another cell. Retention, ADR 0017.

CREATE OR REPLACE FUNCTION tenantry_claim_blob_deletions(
    p_limit integer, p_seconds double precision)
RETURNS TABLE (tenant_id text, ref text)
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, public AS $$
    UPDATE public.blob_deletions d
    SET attempts = d.attempts + 1,
        next_at = clock_timestamp() + make_interval(secs => p_seconds)
    FROM (SELECT x.tenant_id, x.ref FROM public.blob_deletions x
          WHERE x.next_at <= clock_timestamp()
            AND x.tenant_id <> ALL (public.tenantry_frozen_tenants())
          ORDER BY x.next_at LIMIT p_limit FOR UPDATE SKIP LOCKED) due
    WHERE d.tenant_id = due.tenant_id AND d.ref = due.ref
    RETURNING d.tenant_id, d.ref
$$;
REVOKE ALL ON FUNCTION tenantry_claim_blob_deletions(integer, double precision)
    FROM PUBLIC, tenantry_app, tenantry_console;
GRANT EXECUTE ON FUNCTION tenantry_claim_blob_deletions(integer, double precision)
    TO tenantry_app;
