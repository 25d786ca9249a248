-- The tool gateway: the vault, approvals, and the audit log.
--
-- Its functions and triggers are routines now, each the source of its latest definition
-- (src/tenantry/db/routines/, ADR 0037): expired_approvals, refuse_change_but_retention
-- (the audit log's trigger).

-- Each tenant's data key, wrapped (AES-GCM) by the platform's master key. The master key
-- is configuration, never stored here; `master_key_id` names which one wrapped this key.
CREATE TABLE tenant_keys (
    tenant_id       text PRIMARY KEY REFERENCES tenants (tenant_id),
    wrapped_key     bytea NOT NULL,
    nonce           bytea NOT NULL,
    master_key_id   text NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT now(),
    rotated_at      timestamptz
);

-- Secrets: write-only through the API; only the tool gateway decrypts them, per call.
CREATE TABLE secrets (
    tenant_id   text NOT NULL REFERENCES tenants (tenant_id),
    name        text NOT NULL CHECK (name ~ '^[A-Za-z0-9_.-]{1,128}$'),
    ciphertext  bytea NOT NULL,
    nonce       bytea NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, name)
);

ALTER TABLE tool_servers ADD COLUMN secret_ref text;  -- name of a secret in the vault

-- How long an approval may wait before the model is told it expired.
ALTER TABLE tenants ADD COLUMN approval_ttl_seconds integer NOT NULL DEFAULT 604800
    CHECK (approval_ttl_seconds > 0);

CREATE TABLE approvals (
    tenant_id           text NOT NULL,
    approval_id         uuid NOT NULL,
    run_id              uuid NOT NULL,
    -- Bound to one call: its key and the exact arguments the approver sees.
    key                 text NOT NULL,
    tool                text NOT NULL,
    arguments           jsonb NOT NULL,
    arguments_sha256    bytea NOT NULL,
    status              text NOT NULL DEFAULT 'pending'
                            CHECK (status IN ('pending', 'approved', 'denied', 'expired')),
    comment             text,
    requested_at        timestamptz NOT NULL DEFAULT now(),
    expires_at          timestamptz NOT NULL,
    decided_at          timestamptz,
    PRIMARY KEY (tenant_id, approval_id),
    UNIQUE (tenant_id, key),
    FOREIGN KEY (tenant_id, run_id) REFERENCES runs (tenant_id, run_id)
);
CREATE INDEX approvals_pending ON approvals (tenant_id, requested_at) WHERE status = 'pending';
CREATE INDEX approvals_expiring ON approvals (expires_at) WHERE status = 'pending';

-- Every tool call, append-only. Never the credential; arguments only as a digest.
CREATE TABLE audit_log (
    tenant_id           text NOT NULL,
    audit_id            uuid NOT NULL,
    run_id              uuid NOT NULL,
    tool                text NOT NULL,
    server              text,
    key                 text NOT NULL,
    arguments_sha256    bytea,
    outcome             text NOT NULL,
    detail              text,
    duration_ms         double precision NOT NULL,
    created_at          timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, audit_id)
);

ALTER TABLE tenant_keys ENABLE ROW LEVEL SECURITY;
ALTER TABLE secrets ENABLE ROW LEVEL SECURITY;
ALTER TABLE approvals ENABLE ROW LEVEL SECURITY;
ALTER TABLE audit_log ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON tenant_keys USING (tenant_id = tenantry_current_tenant());
CREATE POLICY tenant_isolation ON secrets USING (tenant_id = tenantry_current_tenant());
CREATE POLICY tenant_isolation ON approvals USING (tenant_id = tenantry_current_tenant());
CREATE POLICY tenant_isolation ON audit_log USING (tenant_id = tenantry_current_tenant());

GRANT SELECT, INSERT, UPDATE ON tenant_keys, secrets, approvals TO tenantry_app;
GRANT SELECT, INSERT ON audit_log TO tenantry_app;
GRANT UPDATE (secret_ref, tools, tools_sha256) ON tool_servers TO tenantry_app;
