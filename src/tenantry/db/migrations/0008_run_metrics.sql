-- Runs by status for /metrics (issue 8), by tenant class (plan) — never by tenant id.
-- Live statuses are already counted in tenant_load; ended runs are counted here, kept by a
-- trigger in the same transaction as each run's terminal status change (and its removal,
-- should retention ever delete run rows), so a scrape reads a few rows instead of
-- counting the runs table.
--
-- Its functions and triggers are routines now, each the source of its latest definition
-- (src/tenantry/db/routines/, ADR 0037): count_ended_runs, runs_by_status.
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

ALTER TABLE run_status_totals ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON run_status_totals
    USING (tenant_id = tenantry_current_tenant());
GRANT SELECT ON run_status_totals TO tenantry_app;
