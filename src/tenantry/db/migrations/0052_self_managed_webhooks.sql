-- Webhooks the tenant manages itself (issue 41, ADR 0045): its endpoints, the deliveries to
-- them queued with a run's end, every attempt's record (to both kinds of destination), and
-- the signing secret a rotation replaced, still signing until its overlap ends.
-- Expand only: three new tables and two nullable columns; the previous release neither
-- reads nor writes them (its commit_step and set_terminal_status queue no endpoint
-- deliveries, its webhooks sign with the current secret alone).

-- 1. A tenant's endpoints: a URL that hears every run's end, or those of the statuses and
--    agents named. At most 10 a tenant, held by the slot (UNIQUE): two registrations at
--    once cannot both take the tenth place.
CREATE TABLE webhook_endpoints (
    tenant_id    text NOT NULL REFERENCES tenants (tenant_id),
    endpoint_id  uuid NOT NULL,
    slot         smallint NOT NULL CHECK (slot BETWEEN 1 AND 10),
    url          text NOT NULL CHECK (length(url) BETWEEN 1 AND 2048),
    statuses     text[] CHECK (statuses <@ ARRAY['finished', 'failed', 'cancelled']
                               AND cardinality(statuses) BETWEEN 1 AND 3),
    agent_ids    uuid[] CHECK (cardinality(agent_ids) BETWEEN 1 AND 20),
    description  text CHECK (length(description) <= 200),
    created_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, endpoint_id),
    UNIQUE (tenant_id, slot)
);
ALTER TABLE webhook_endpoints ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON webhook_endpoints
    USING (tenant_id = tenantry_current_tenant());
GRANT SELECT, INSERT, DELETE ON webhook_endpoints TO tenantry_app;

-- 2. The outbox of endpoint deliveries: one row per run and endpoint, queued in the
--    transaction of the run's terminal event (tenantry_commit_step_v2, set_terminal_status)
--    as the run's own webhook is on its row. They go with their run (retention, erase,
--    DELETE /v1/runs/{id}: the summary cannot be sent without it) and with their endpoint.
CREATE TABLE endpoint_deliveries (
    tenant_id    text NOT NULL,
    run_id       uuid NOT NULL,
    endpoint_id  uuid NOT NULL,
    state        text NOT NULL DEFAULT 'pending'
                 CHECK (state IN ('pending', 'delivered', 'failed')),
    attempts     integer NOT NULL DEFAULT 0,
    next_at      timestamptz,
    PRIMARY KEY (tenant_id, run_id, endpoint_id),
    FOREIGN KEY (tenant_id, run_id) REFERENCES runs (tenant_id, run_id) ON DELETE CASCADE,
    FOREIGN KEY (tenant_id, endpoint_id) REFERENCES webhook_endpoints (tenant_id, endpoint_id)
        ON DELETE CASCADE
);
CREATE INDEX endpoint_deliveries_due ON endpoint_deliveries (next_at) WHERE state = 'pending';
CREATE INDEX endpoint_deliveries_by_endpoint ON endpoint_deliveries (tenant_id, endpoint_id);
ALTER TABLE endpoint_deliveries ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON endpoint_deliveries
    USING (tenant_id = tenantry_current_tenant());
GRANT SELECT, INSERT, UPDATE (state, next_at) ON endpoint_deliveries TO tenantry_app;

-- 3. Every attempt, to a run's own URL (endpoint_id NULL) or an endpoint: what the tenant
--    reads as its delivery history. The reason is the stable one the run's log shows, never
--    an address or the receiver's text. delivery_id is a UUIDv7 made by the sender: the
--    newest-first order and the cursor. Goes with its run; outlives its endpoint (the URL
--    is kept in the row).
CREATE TABLE webhook_attempts (
    tenant_id     text NOT NULL,
    delivery_id   uuid NOT NULL,
    run_id        uuid NOT NULL,
    endpoint_id   uuid,
    url           text NOT NULL,
    attempt       integer NOT NULL CHECK (attempt >= 1),
    attempted_at  timestamptz NOT NULL DEFAULT now(),
    outcome       text NOT NULL CHECK (outcome IN ('delivered', 'retrying', 'failed')),
    status_code   integer,
    error         text,
    PRIMARY KEY (tenant_id, delivery_id),
    FOREIGN KEY (tenant_id, run_id) REFERENCES runs (tenant_id, run_id) ON DELETE CASCADE
);
CREATE INDEX webhook_attempts_by_run ON webhook_attempts (tenant_id, run_id, delivery_id);
CREATE INDEX webhook_attempts_by_endpoint ON webhook_attempts (tenant_id, endpoint_id,
                                                               delivery_id);
ALTER TABLE webhook_attempts ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON webhook_attempts
    USING (tenant_id = tenantry_current_tenant());
GRANT SELECT, INSERT ON webhook_attempts TO tenantry_app;

-- 4. The secret a tenant's rotation replaced, signing beside the new one until
--    previous_until (ADR 0045). The operator's rotation clears both: no overlap.
ALTER TABLE tenants ADD COLUMN webhook_secret_previous text;
ALTER TABLE tenants ADD COLUMN webhook_secret_previous_until timestamptz;
GRANT UPDATE (webhook_secret_previous, webhook_secret_previous_until) ON tenants
    TO tenantry_app;
