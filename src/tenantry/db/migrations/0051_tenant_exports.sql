-- A tenant's exports (issue 41, ADR 0044): one row per `POST /v1/exports`, a durable job a
-- leased, fenced loop beside the worker carries out (exports/job.py), and the registry of
-- its one archive in the object store (`<tenant>/<archive_ref>`).
-- Expand only: a new table, and a column of the blob outbox made optional; the previous
-- release neither reads the table nor writes the outbox's rows without a run.

-- 1. One row per export. `archive_ref` is set by each claim, before the archive exists
--    (the row first, then the object, as ADR 0042 has it for blobs), and names the claim's
--    epoch: a claim that takes over an expired lease queues the previous attempt's object
--    for deletion, and a stale owner's late write can never replace the archive of the
--    attempt that finished. `status` is 'ready' only in the fenced statement that records
--    a whole archive's size and counts.
CREATE TABLE exports (
    tenant_id        text NOT NULL REFERENCES tenants (tenant_id),
    export_id        uuid NOT NULL,
    status           text NOT NULL DEFAULT 'queued'
                     CHECK (status IN ('queued', 'running', 'ready', 'failed')),
    idempotency_key  text CHECK (length(idempotency_key) BETWEEN 1 AND 255),
    requested_by     text NOT NULL,
    lease_owner      text,
    lease_epoch      bigint NOT NULL DEFAULT 0,
    lease_expires_at timestamptz,
    attempts         integer NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    archive_ref      text,
    bytes            bigint CHECK (bytes >= 0),
    counts           jsonb,
    error            text,
    created_at       timestamptz NOT NULL DEFAULT now(),
    started_at       timestamptz,
    finished_at      timestamptz,
    expires_at       timestamptz,
    PRIMARY KEY (tenant_id, export_id),
    UNIQUE (tenant_id, idempotency_key)
);
-- The claim's scan: only the unfinished ones, oldest first.
CREATE INDEX exports_unfinished ON exports (created_at)
    WHERE status IN ('queued', 'running');
-- The cleaner's: a tenant's finished ones by expiry.
CREATE INDEX exports_expiry ON exports (tenant_id, expires_at)
    WHERE status IN ('ready', 'failed');
ALTER TABLE exports ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON exports USING (tenant_id = tenantry_current_tenant());
-- No DELETE: exports leave through the cleaner's fenced routine (tenantry_expire_exports).
GRANT SELECT, INSERT, UPDATE ON exports TO tenantry_app;

-- 2. An export's archive belongs to no run: its deletion goes through the same outbox as a
--    run's blobs (ADR 0017), with no run id.
ALTER TABLE blob_deletions ALTER COLUMN run_id DROP NOT NULL;
