-- Foundation schema: tenants, API keys, agents with immutable versions, runs and their
-- event log. Every primary key leads with tenant_id (invariant 4, and what lets the schema
-- be distributed by tenant later). Row-level security is the second wall behind every
-- query's own WHERE clause: the application role has no BYPASSRLS and each transaction
-- sets `tenantry.tenant_id`.
--
-- Its functions and triggers are routines now, each the source of its latest definition
-- (src/tenantry/db/routines/, ADR 0037): current_tenant, refuse_change, notify_event,
-- authenticate.

-- The application role. NOLOGIN: the platform connects as its configured user and switches
-- to this role on every pooled connection (see tenantry.db.pool).
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'tenantry_app') THEN
        CREATE ROLE tenantry_app NOLOGIN NOBYPASSRLS;
    END IF;
END
$$;

CREATE TABLE tenants (
    tenant_id   text PRIMARY KEY CHECK (tenant_id ~ '^[a-z0-9][a-z0-9_-]{2,63}$'),
    name        text NOT NULL CHECK (length(name) BETWEEN 1 AND 200),
    region      text NOT NULL DEFAULT 'default',
    plan        text NOT NULL DEFAULT 'standard',
    home_cell   text NOT NULL DEFAULT 'local',
    created_at  timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE api_keys (
    tenant_id   text NOT NULL REFERENCES tenants (tenant_id),
    key_id      uuid NOT NULL,
    -- SHA-256 of the whole key; the key itself is shown once and never stored.
    key_hash    bytea NOT NULL UNIQUE CHECK (octet_length(key_hash) = 32),
    key_prefix  text NOT NULL,
    name        text NOT NULL DEFAULT '',
    created_at  timestamptz NOT NULL DEFAULT now(),
    revoked_at  timestamptz,
    PRIMARY KEY (tenant_id, key_id)
);

CREATE TABLE agents (
    tenant_id       text NOT NULL REFERENCES tenants (tenant_id),
    agent_id        uuid NOT NULL,
    name            text NOT NULL,
    latest_version  integer NOT NULL CHECK (latest_version >= 1),
    created_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, agent_id),
    UNIQUE (tenant_id, name)
);

CREATE TABLE agent_versions (
    tenant_id   text NOT NULL,
    agent_id    uuid NOT NULL,
    version     integer NOT NULL CHECK (version >= 1),
    spec        jsonb NOT NULL,
    spec_sha256 bytea NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, agent_id, version),
    FOREIGN KEY (tenant_id, agent_id) REFERENCES agents (tenant_id, agent_id)
);
-- Invariant 7: a version, once written, never changes. The privilege is withheld from the
-- application role (below) and a trigger stops everyone else, the table owner included.

CREATE TABLE runs (
    tenant_id           text NOT NULL REFERENCES tenants (tenant_id),
    run_id              uuid NOT NULL,
    agent_id            uuid NOT NULL,
    agent_version       integer NOT NULL,
    status              text NOT NULL DEFAULT 'queued' CHECK (status IN
                            ('queued', 'running', 'waiting', 'finished', 'failed', 'cancelled')),
    input               jsonb NOT NULL,
    idempotency_key     text CHECK (length(idempotency_key) BETWEEN 1 AND 255),
    request_sha256      bytea NOT NULL,
    webhook_url         text,
    priority            text NOT NULL DEFAULT 'interactive'
                            CHECK (priority IN ('interactive', 'batch')),
    parent_run_id       uuid,
    -- The one writer: lease owner, fencing epoch and expiry (see runs/lease.py).
    lease_owner         text,
    lease_epoch         bigint NOT NULL DEFAULT 0,
    lease_expires_at    timestamptz,
    -- Event slots are handed out from this counter under the row lock, never max(seq)+1.
    last_seq            integer NOT NULL DEFAULT 0,
    cancel_requested    boolean NOT NULL DEFAULT false,
    answer              jsonb,
    error               jsonb,
    input_tokens        bigint NOT NULL DEFAULT 0,
    output_tokens       bigint NOT NULL DEFAULT 0,
    cost_micros         bigint NOT NULL DEFAULT 0,
    steps               integer NOT NULL DEFAULT 0,
    created_at          timestamptz NOT NULL DEFAULT now(),
    updated_at          timestamptz NOT NULL DEFAULT now(),
    finished_at         timestamptz,
    PRIMARY KEY (tenant_id, run_id),
    UNIQUE (tenant_id, idempotency_key),
    FOREIGN KEY (tenant_id, agent_id, agent_version)
        REFERENCES agent_versions (tenant_id, agent_id, version)
);

-- Claimable work across tenants, oldest first; small because terminal runs leave it.
CREATE INDEX runs_claimable ON runs (created_at)
    WHERE status IN ('queued', 'running');

CREATE TABLE run_events (
    tenant_id   text NOT NULL,
    run_id      uuid NOT NULL,
    seq         integer NOT NULL CHECK (seq >= 1),
    type        text NOT NULL,
    -- Bounded (invariant 10): larger payloads are stored by reference.
    data        jsonb NOT NULL CHECK (octet_length(data::text) <= 8192),
    format      smallint NOT NULL DEFAULT 1,
    created_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, run_id, seq),
    FOREIGN KEY (tenant_id, run_id) REFERENCES runs (tenant_id, run_id)
);

-- Row-level security: each tenant-owned table shows only the current tenant's rows.
ALTER TABLE tenants ENABLE ROW LEVEL SECURITY;
ALTER TABLE api_keys ENABLE ROW LEVEL SECURITY;
ALTER TABLE agents ENABLE ROW LEVEL SECURITY;
ALTER TABLE agent_versions ENABLE ROW LEVEL SECURITY;
ALTER TABLE runs ENABLE ROW LEVEL SECURITY;
ALTER TABLE run_events ENABLE ROW LEVEL SECURITY;

CREATE POLICY tenant_isolation ON tenants
    USING (tenant_id = tenantry_current_tenant());
CREATE POLICY tenant_isolation ON api_keys
    USING (tenant_id = tenantry_current_tenant());
CREATE POLICY tenant_isolation ON agents
    USING (tenant_id = tenantry_current_tenant());
CREATE POLICY tenant_isolation ON agent_versions
    USING (tenant_id = tenantry_current_tenant());
CREATE POLICY tenant_isolation ON runs
    USING (tenant_id = tenantry_current_tenant());
CREATE POLICY tenant_isolation ON run_events
    USING (tenant_id = tenantry_current_tenant());

GRANT USAGE ON SCHEMA public TO tenantry_app;
GRANT SELECT, INSERT ON tenants, agent_versions, run_events TO tenantry_app;
GRANT SELECT, INSERT, UPDATE ON api_keys, agents, runs TO tenantry_app;
-- The policies' function is a routine applied before any migration (it must exist when a
-- policy is created); its grant is here, once the role exists.
GRANT EXECUTE ON FUNCTION tenantry_current_tenant() TO tenantry_app;
