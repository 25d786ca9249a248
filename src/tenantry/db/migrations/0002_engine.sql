-- The run engine: claimable runs, leases renewed by workers, tool servers, webhook outbox.

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

-- Workers wake on this instead of polling for new work.
CREATE FUNCTION tenantry_notify_runnable() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.status = 'queued' THEN
        PERFORM pg_notify('tenantry_runnable', '');
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER runs_notify_runnable
    AFTER INSERT OR UPDATE OF status ON runs
    FOR EACH ROW EXECUTE FUNCTION tenantry_notify_runnable();

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

-- THE claim function: the one seam through which work is handed to workers (the fair
-- scheduler replaces its body). Claims are cross-tenant, so it is SECURITY DEFINER and
-- returns nothing but what a worker needs to start: tenant, run and the new lease epoch.
-- Queued runs go oldest first; then runs whose worker died (lease expired).
CREATE FUNCTION tenantry_claim_runs(p_worker text, p_batch integer, p_lease_seconds double precision)
RETURNS TABLE (tenant_id text, run_id uuid, lease_epoch bigint)
LANGUAGE sql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, public AS $$
    WITH expired AS (
        SELECT r.tenant_id, r.run_id FROM public.runs r
        WHERE r.status = 'running' AND r.lease_expires_at < now()
        ORDER BY r.lease_expires_at
        LIMIT p_batch
        FOR UPDATE SKIP LOCKED
    ), queued AS (
        SELECT r.tenant_id, r.run_id FROM public.runs r
        WHERE r.status = 'queued' AND (r.available_at IS NULL OR r.available_at <= now())
        ORDER BY r.created_at
        LIMIT (SELECT p_batch - count(*) FROM expired)
        FOR UPDATE SKIP LOCKED
    ), picked AS (
        SELECT * FROM expired UNION ALL SELECT * FROM queued
    )
    UPDATE public.runs r
    SET status = 'running', lease_owner = p_worker, lease_epoch = r.lease_epoch + 1,
        lease_expires_at = now() + make_interval(secs => p_lease_seconds),
        available_at = NULL, updated_at = now()
    FROM picked
    WHERE r.tenant_id = picked.tenant_id AND r.run_id = picked.run_id
    RETURNING r.tenant_id, r.run_id, r.lease_epoch
$$;

-- Renew many leases in one round trip; returns the ones still held (others were lost).
CREATE FUNCTION tenantry_renew_leases(
    p_worker text, p_tenants text[], p_runs uuid[], p_epochs bigint[],
    p_lease_seconds double precision)
RETURNS TABLE (tenant_id text, run_id uuid)
LANGUAGE sql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, public AS $$
    UPDATE public.runs r
    SET lease_expires_at = now() + make_interval(secs => p_lease_seconds)
    FROM unnest(p_tenants, p_runs, p_epochs) AS held(tenant_id, run_id, epoch)
    WHERE r.tenant_id = held.tenant_id AND r.run_id = held.run_id
      AND r.lease_epoch = held.epoch AND r.lease_owner = p_worker AND r.status = 'running'
    RETURNING r.tenant_id, r.run_id
$$;

-- Webhook deliveries due now, across tenants, claimed for p_seconds so two workers do not
-- send the same one at the same time (delivery is at-least-once; receivers dedupe by run).
CREATE FUNCTION tenantry_claim_webhooks(p_batch integer, p_seconds double precision)
RETURNS TABLE (tenant_id text, run_id uuid, attempts integer)
LANGUAGE sql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, public AS $$
    WITH due AS (
        SELECT r.tenant_id, r.run_id FROM public.runs r
        WHERE r.webhook_state = 'pending' AND r.webhook_next_at <= now()
        ORDER BY r.webhook_next_at
        LIMIT p_batch
        FOR UPDATE SKIP LOCKED
    )
    UPDATE public.runs r
    SET webhook_next_at = now() + make_interval(secs => p_seconds),
        webhook_attempts = r.webhook_attempts + 1
    FROM due
    WHERE r.tenant_id = due.tenant_id AND r.run_id = due.run_id
    RETURNING r.tenant_id, r.run_id, r.webhook_attempts
$$;

REVOKE ALL ON FUNCTION tenantry_claim_runs(text, integer, double precision) FROM PUBLIC;
REVOKE ALL ON FUNCTION tenantry_renew_leases(text, text[], uuid[], bigint[], double precision)
    FROM PUBLIC;
REVOKE ALL ON FUNCTION tenantry_claim_webhooks(integer, double precision) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION tenantry_claim_runs(text, integer, double precision) TO tenantry_app;
GRANT EXECUTE ON FUNCTION tenantry_renew_leases(text, text[], uuid[], bigint[], double precision)
    TO tenantry_app;
GRANT EXECUTE ON FUNCTION tenantry_claim_webhooks(integer, double precision) TO tenantry_app;

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
