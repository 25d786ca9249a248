-- Renew many run leases in one round trip; returns the ones still held (others were lost).

CREATE OR REPLACE FUNCTION tenantry_renew_leases(
    p_worker text, p_tenants text[], p_runs uuid[], p_epochs bigint[],
    p_lease_seconds double precision)
RETURNS TABLE (tenant_id text, run_id uuid)
LANGUAGE sql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, public AS $$
    UPDATE public.runs r
    SET lease_expires_at = now() + make_interval(secs => p_lease_seconds)
    FROM unnest(p_tenants, p_runs, p_epochs) AS held(tenant_id, run_id, epoch)
    WHERE r.tenant_id = held.tenant_id AND r.run_id = held.run_id
      AND r.lease_epoch = held.epoch AND r.lease_owner = p_worker AND r.status = 'running'
    RETURNING r.tenant_id, r.run_id
$$;
REVOKE ALL ON FUNCTION tenantry_renew_leases(text, text[], uuid[], bigint[], double precision)
    FROM PUBLIC, tenantry_app, tenantry_console;
GRANT EXECUTE ON FUNCTION tenantry_renew_leases(text, text[], uuid[], bigint[],
    double precision) TO tenantry_app;
