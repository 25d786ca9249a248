-- Retention's gauges for /metrics, by tenant class (never by tenant id): candidates waiting
-- (ended before the tenant's cutoff), tombstones, blobs waiting to be deleted, the bytes
-- the tenants' blobs hold (the registry's counted usage, migration 0048), the cleanup lag
-- (the age of the oldest candidate past its cutoff), runs deleted ever and by each
-- tenant's last pass. Tombstones come from the lease row's counters, not count(*): kept
-- forever by default, they outgrow anything a scrape may read.
--
-- v2 of tenantry_retention_gauges: the blob bytes are a new column (a release before it
-- still calls the first, kept as it was).

CREATE OR REPLACE FUNCTION tenantry_retention_gauges_v2(p_default_days integer)
RETURNS TABLE (tenant_class text, candidates bigint, tombstones bigint,
               blob_deletions bigint, blob_bytes bigint, lag_seconds double precision, deleted_total bigint,
               last_deleted bigint)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public AS $$
    SELECT t.plan, sum(d.n)::bigint,
           coalesce(sum(l.deleted_total - l.tombstones_expired), 0)::bigint, sum(b.n)::bigint,
           coalesce(sum(u.bytes), 0)::bigint,
           coalesce(max(extract(epoch FROM d.cutoff - d.oldest)), 0)::double precision,
           coalesce(sum(l.deleted_total), 0)::bigint, coalesce(sum(l.last_deleted), 0)::bigint
    FROM public.tenants t
    LEFT JOIN public.retention_policies p ON p.tenant_id = t.tenant_id
    LEFT JOIN public.cleanup_leases l ON l.tenant_id = t.tenant_id
    LEFT JOIN public.blob_usage u ON u.tenant_id = t.tenant_id
    -- The predicate is the candidates index's, so each tenant's count is a range scan.
    CROSS JOIN LATERAL (
        SELECT count(*) AS n, min(coalesce(r.finished_at, r.updated_at)) AS oldest,
               now() - make_interval(days => coalesce(p.runs_days, p_default_days)) AS cutoff
        FROM public.runs r
        WHERE r.tenant_id = t.tenant_id
          AND (r.status IN ('finished', 'failed', 'cancelled')
               OR (r.status = 'waiting' AND (r.error->>'dead_lettered') = 'true'))
          AND coalesce(r.finished_at, r.updated_at)
              < now() - make_interval(days => coalesce(p.runs_days, p_default_days))
    ) d
    CROSS JOIN LATERAL (SELECT count(*) AS n FROM public.blob_deletions x
                        WHERE x.tenant_id = t.tenant_id) b
    GROUP BY t.plan ORDER BY t.plan
$$;
REVOKE ALL ON FUNCTION tenantry_retention_gauges_v2(integer)
    FROM PUBLIC, tenantry_app, tenantry_console;
GRANT EXECUTE ON FUNCTION tenantry_retention_gauges_v2(integer) TO tenantry_app;
