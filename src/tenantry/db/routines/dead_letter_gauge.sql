-- The /metrics gauge of dead-lettered activity tasks (ADR 0013): every tenant class with
-- its count, zero included (a gauge that vanishes when it reaches zero would hide the
-- recovery). By tenant class, never tenant id. The console role's alone (ADR 0011).

CREATE OR REPLACE FUNCTION tenantry_dead_letter_gauge()
RETURNS TABLE (tenant_class text, dead_lettered bigint)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public AS $$
    SELECT t.plan, count(r.run_id)
    FROM public.tenants t
    LEFT JOIN public.runs r
      ON r.tenant_id = t.tenant_id AND r.status = 'waiting' AND r.kind = 'activity'
     AND coalesce((r.error->>'dead_lettered')::boolean, false)
    GROUP BY t.plan
    ORDER BY t.plan
$$;
REVOKE ALL ON FUNCTION tenantry_dead_letter_gauge()
    FROM PUBLIC, tenantry_app, tenantry_console;
GRANT EXECUTE ON FUNCTION tenantry_dead_letter_gauge() TO tenantry_console;
