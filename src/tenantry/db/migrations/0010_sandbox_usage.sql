-- Sandbox time in the billing record (DESIGN §7b: tenants pay per token and per sandbox
-- second). One immutable fact per built-in tool call that used the run's sandbox, written
-- with its ToolCompleted in the same transaction: the time the call spent executing in the
-- sandbox (exec_ms), never starting or idle time — a waiting run's sandbox is paused or gone.
--
-- Its functions and triggers are routines now, each the source of its latest definition
-- (src/tenantry/db/routines/, ADR 0037): refuse_change, usage_per_tenant.
CREATE TABLE sandbox_usage_facts (
    tenant_id       text NOT NULL REFERENCES tenants (tenant_id),
    run_id          uuid NOT NULL,
    seq             integer NOT NULL,  -- the ToolCompleted it records
    agent_id        uuid NOT NULL,
    agent_version   integer NOT NULL,
    backend         text NOT NULL,
    sandbox_ms      bigint NOT NULL CHECK (sandbox_ms >= 0),
    created_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, run_id, seq),
    FOREIGN KEY (tenant_id, run_id, seq) REFERENCES run_events (tenant_id, run_id, seq)
);
CREATE INDEX sandbox_usage_facts_by_time ON sandbox_usage_facts (tenant_id, created_at);
ALTER TABLE sandbox_usage_facts ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON sandbox_usage_facts
    USING (tenant_id = tenantry_current_tenant());
GRANT SELECT, INSERT ON sandbox_usage_facts TO tenantry_app;

-- The operator's per-tenant report gains the sandbox time (a new result column: the
-- function is replaced, not altered).
DROP FUNCTION IF EXISTS tenantry_usage_per_tenant(timestamptz, timestamptz);
