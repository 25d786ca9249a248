-- Agent versions flagged for review (issue 15): refused egress attempts from a version's
-- sandboxes are counted here, written with the EgressRefused events of the tool step that
-- collected them (under the run's lease, in the same transaction); past the operator's
-- threshold the version is flagged. One row per version that ever had a refusal.
--
-- Its functions and triggers are routines now, each the source of its latest definition
-- (src/tenantry/db/routines/, ADR 0037): console_flagged_versions.

CREATE TABLE agent_version_flags (
    tenant_id       text NOT NULL,
    agent_id        uuid NOT NULL,
    version         integer NOT NULL,
    refused_egress  bigint NOT NULL DEFAULT 0 CHECK (refused_egress >= 0),
    reason          text CHECK (reason IN ('egress_refused')),
    flagged_at      timestamptz,  -- null: counted, not (yet) flagged
    updated_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, agent_id, version),
    FOREIGN KEY (tenant_id, agent_id, version)
        REFERENCES agent_versions (tenant_id, agent_id, version),
    CHECK ((reason IS NULL) = (flagged_at IS NULL))
);
-- The console's list of flagged versions, per tenant.
CREATE INDEX agent_version_flags_flagged ON agent_version_flags (tenant_id, flagged_at)
    WHERE flagged_at IS NOT NULL;
ALTER TABLE agent_version_flags ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON agent_version_flags
    USING (tenant_id = tenantry_current_tenant());
GRANT SELECT, INSERT, UPDATE ON agent_version_flags TO tenantry_app;
