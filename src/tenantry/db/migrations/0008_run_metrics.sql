-- Runs by status for /metrics (issue 8), by tenant class (plan) — never by tenant id.
-- Live statuses are already counted in tenant_load; ended runs are counted here, kept by a
-- trigger in the same transaction as each run's terminal status change (and its removal,
-- should retention ever delete run rows), so a scrape reads a few rows instead of
-- counting the runs table.
CREATE TABLE run_status_totals (
    tenant_id   text NOT NULL REFERENCES tenants (tenant_id),
    status      text NOT NULL CHECK (status IN ('finished', 'failed', 'cancelled')),
    runs        bigint NOT NULL DEFAULT 0 CHECK (runs >= 0),
    PRIMARY KEY (tenant_id, status)
);

INSERT INTO run_status_totals (tenant_id, status, runs)
SELECT tenant_id, status, count(*) FROM runs
WHERE status IN ('finished', 'failed', 'cancelled')
GROUP BY tenant_id, status;

CREATE FUNCTION tenantry_count_ended_runs() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        IF OLD.status IN ('finished', 'failed', 'cancelled') THEN
            UPDATE public.run_status_totals SET runs = runs - 1
            WHERE tenant_id = OLD.tenant_id AND status = OLD.status;
        END IF;
        RETURN NULL;
    END IF;
    IF NEW.status IN ('finished', 'failed', 'cancelled')
       AND OLD.status IS DISTINCT FROM NEW.status THEN
        INSERT INTO public.run_status_totals AS t (tenant_id, status, runs)
        VALUES (NEW.tenant_id, NEW.status, 1)
        ON CONFLICT (tenant_id, status) DO UPDATE SET runs = t.runs + 1;
    END IF;
    RETURN NULL;
END
$$;
CREATE TRIGGER runs_count_ended AFTER UPDATE OF status OR DELETE ON runs
    FOR EACH ROW EXECUTE FUNCTION tenantry_count_ended_runs();

ALTER TABLE run_status_totals ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON run_status_totals
    USING (tenant_id = tenantry_current_tenant());
GRANT SELECT ON run_status_totals TO tenantry_app;

-- Every status of every tenant class (plan), summed: the /metrics gauge tenantry_runs.
CREATE FUNCTION tenantry_runs_by_status()
RETURNS TABLE (tenant_class text, status text, runs bigint)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public AS $$
    SELECT t.plan, s.status, sum(s.runs)::bigint
    FROM (
        SELECT l.tenant_id, v.status, v.runs
        FROM public.tenant_load l
        CROSS JOIN LATERAL (VALUES ('queued', l.queued::bigint), ('running', l.running::bigint),
                                   ('waiting', l.waiting::bigint)) AS v (status, runs)
        UNION ALL
        SELECT e.tenant_id, e.status, e.runs FROM public.run_status_totals e
    ) s
    JOIN public.tenants t ON t.tenant_id = s.tenant_id
    GROUP BY t.plan, s.status
    ORDER BY t.plan, s.status
$$;
REVOKE ALL ON FUNCTION tenantry_runs_by_status() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION tenantry_runs_by_status() TO tenantry_app;
