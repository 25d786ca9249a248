-- The run engine: claimable runs, leases renewed by workers, tool servers, webhook outbox.
--
-- Its functions and triggers are routines now, each the source of its latest definition
-- (src/tenantry/db/routines/, ADR 0037): notify_runnable, claim_runs, renew_leases,
-- claim_webhooks.

-- When a run may next be claimed (retry backoff; parking later). NULL = now.
ALTER TABLE runs ADD COLUMN available_at timestamptz;
-- Webhook outbox on the run row: a terminal run with a webhook is 'pending' until delivered.
ALTER TABLE runs ADD COLUMN webhook_state text
    CHECK (webhook_state IN ('pending', 'delivered', 'failed'));
ALTER TABLE runs ADD COLUMN webhook_attempts integer NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN webhook_next_at timestamptz;

DROP INDEX runs_claimable;
-- Two small indexes instead of one: new work in arrival order, and leases by expiry.
CREATE INDEX runs_queued ON runs (created_at) WHERE status = 'queued';
CREATE INDEX runs_leased ON runs (lease_expires_at) WHERE status = 'running';
CREATE INDEX runs_webhooks_due ON runs (webhook_next_at) WHERE webhook_state = 'pending';

-- Each tenant's signing secret for webhooks (HMAC-SHA256). gen_random_uuid() is a CSPRNG.
ALTER TABLE tenants ADD COLUMN webhook_secret text NOT NULL
    DEFAULT encode(sha256(gen_random_uuid()::text::bytea || gen_random_uuid()::text::bytea), 'hex');
GRANT UPDATE (webhook_secret) ON tenants TO tenantry_app;

-- A tenant's MCP servers, pinned to the tool list read when they were registered.
CREATE TABLE tool_servers (
    tenant_id                   text NOT NULL REFERENCES tenants (tenant_id),
    server_id                   uuid NOT NULL,
    name                        text NOT NULL,
    url                         text NOT NULL,
    honours_idempotency_keys    boolean NOT NULL,
    secret_name                 text,
    tools                       jsonb NOT NULL,
    tools_sha256                bytea NOT NULL,
    created_at                  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, server_id),
    UNIQUE (tenant_id, name)
);
ALTER TABLE tool_servers ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON tool_servers
    USING (tenant_id = tenantry_current_tenant());
GRANT SELECT, INSERT, UPDATE ON tool_servers TO tenantry_app;

-- Event payloads over the 8 KiB inline cap (a long model answer) live here, by reference
-- from their event; readers get the full data back transparently.
CREATE TABLE run_event_payloads (
    tenant_id   text NOT NULL,
    run_id      uuid NOT NULL,
    seq         integer NOT NULL,
    data        jsonb NOT NULL,
    PRIMARY KEY (tenant_id, run_id, seq),
    FOREIGN KEY (tenant_id, run_id, seq) REFERENCES run_events (tenant_id, run_id, seq)
);
ALTER TABLE run_event_payloads ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON run_event_payloads
    USING (tenant_id = tenantry_current_tenant());
GRANT SELECT, INSERT ON run_event_payloads TO tenantry_app;
