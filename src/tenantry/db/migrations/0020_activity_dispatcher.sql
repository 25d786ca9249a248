-- Activity versions and their dispatcher (issue 16, the task half; ADR 0013). An activity
-- task is a run of kind 'activity' whose agent version stands for the activity version
-- (as task types do for 'task'), so admission, the fair claim, fenced leases and the event
-- log are the runs'. What an agent version cannot say is here: the bundle by digest and the
-- attempt settings, immutable once published.
--
-- Its functions and triggers are routines now, each the source of its latest definition
-- (src/tenantry/db/routines/, ADR 0037): claim_activities.
ALTER TABLE runs DROP CONSTRAINT runs_kind_check;
ALTER TABLE runs ADD CONSTRAINT runs_kind_check CHECK (kind IN ('agent', 'task', 'activity'));

-- Code by digest, tenant first: two tenants uploading the same bytes get two rows, so no
-- tenant can learn from a dedupe that another holds a given bundle.
CREATE TABLE activity_bundles (
    tenant_id   text NOT NULL REFERENCES tenants (tenant_id),
    digest      text NOT NULL CHECK (digest ~ '^sha256:[0-9a-f]{64}$'),
    entrypoint  text NOT NULL,
    files       jsonb NOT NULL,  -- {path: base64}; at most 1 MiB of code (bundle.py)
    created_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, digest)
);
ALTER TABLE activity_bundles ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON activity_bundles
    USING (tenant_id = tenantry_current_tenant());
GRANT SELECT, INSERT ON activity_bundles TO tenantry_app;

CREATE TABLE activity_versions (
    tenant_id             text NOT NULL,
    agent_id              uuid NOT NULL,
    version               integer NOT NULL CHECK (version >= 1),
    name                  text NOT NULL,
    bundle_digest         text NOT NULL,
    timeout_s             double precision NOT NULL CHECK (timeout_s > 0 AND timeout_s <= 3600),
    heartbeat_timeout_s   double precision CHECK (heartbeat_timeout_s > 0),
    max_attempts          integer NOT NULL CHECK (max_attempts BETWEEN 1 AND 100),
    backoff_s             double precision NOT NULL CHECK (backoff_s BETWEEN 0 AND 86400),
    secret_names          text[] NOT NULL DEFAULT '{}',
    egress                text[] NOT NULL DEFAULT '{}',
    retryable_exit_codes  integer[] NOT NULL DEFAULT '{}',
    max_sandbox_deaths    integer NOT NULL DEFAULT 3 CHECK (max_sandbox_deaths BETWEEN 1 AND 100),
    created_at            timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, agent_id, version),
    UNIQUE (tenant_id, name, version),
    FOREIGN KEY (tenant_id, agent_id, version)
        REFERENCES agent_versions (tenant_id, agent_id, version),
    FOREIGN KEY (tenant_id, bundle_digest) REFERENCES activity_bundles (tenant_id, digest)
);
ALTER TABLE activity_versions ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON activity_versions
    USING (tenant_id = tenantry_current_tenant());
GRANT SELECT, INSERT ON activity_versions TO tenantry_app;

-- Concurrent activity attempts per tenant (a retry storm burns only its own slots).
ALTER TABLE tenant_policies ADD COLUMN max_activity_slots integer NOT NULL DEFAULT 2
    CHECK (max_activity_slots BETWEEN 1 AND 100000);

CREATE INDEX runs_activity_running ON runs (tenant_id)
    WHERE kind = 'activity' AND status = 'running';
