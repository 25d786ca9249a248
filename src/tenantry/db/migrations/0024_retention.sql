-- Retention (issue 17, DESIGN §11b, ADR 0017): terminal runs and tasks leave on schedule or
-- on request; an immutable tombstone says what was there; billing and audit stay.
--
-- Only the retention functions delete operational rows. The application role has no DELETE
-- privilege on any of these tables, and the immutability triggers of the event log stop
-- everyone else — the owner included — unless the deleting function says, for the
-- length of its own call, that a retention batch is under way.
--
-- Its functions and triggers are routines now, each the source of its latest definition
-- (src/tenantry/db/routines/, ADR 0037): retention_under_way, refuse_change_but_retention,
-- erase_tenant_state, uncount_deleted_run, count_ended_runs, take_cleanup_lease,
-- cleanup_due, keep_cleanup_lease, retention_batch, retention_expire, claim_blob_deletions,
-- blob_deleted, retention_gauges, console_retention, console_erase_job.

-- 1. Usage facts and sandbox usage facts outlive the event they record: they name the
--    run and seq as values (what billing needs), never as a foreign key into the log.
ALTER TABLE usage_facts DROP CONSTRAINT usage_facts_tenant_id_run_id_seq_fkey;
ALTER TABLE sandbox_usage_facts DROP CONSTRAINT sandbox_usage_facts_tenant_id_run_id_seq_fkey;

-- 2. The operator's policy. No row: the defaults (retention/policy.py holds them, the
--    API shows them): runs kept 30 days, tombstones and audit kept forever, blobs follow
--    their run.
CREATE TABLE retention_policies (
    tenant_id          text PRIMARY KEY REFERENCES tenants (tenant_id),
    runs_days          integer NOT NULL CHECK (runs_days BETWEEN 0 AND 36500),
    tombstones_days    integer CHECK (tombstones_days BETWEEN 0 AND 36500),  -- NULL: forever
    audit_days         integer CHECK (audit_days BETWEEN 0 AND 36500),       -- NULL: forever
    blobs_follow_runs  boolean NOT NULL DEFAULT true,
    updated_at         timestamptz NOT NULL DEFAULT now()
);
ALTER TABLE retention_policies ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON retention_policies
    USING (tenant_id = tenantry_current_tenant());
GRANT SELECT, INSERT, UPDATE ON retention_policies TO tenantry_app;

-- 3. What remains of a deleted run (ADR 0017): who, what, when, how much — never its
--    input, answer, events or the idempotency key itself (only its digest, so a key is
--    not reusable while its tombstone lives).
CREATE TABLE tombstones (
    tenant_id               text NOT NULL REFERENCES tenants (tenant_id),
    run_id                  uuid NOT NULL,
    kind                    text NOT NULL,
    agent_id                uuid NOT NULL,
    agent_version           integer NOT NULL,
    parent_run_id           uuid,
    status                  text NOT NULL CHECK (status IN
                                ('finished', 'failed', 'cancelled', 'dead_lettered')),
    created_at              timestamptz NOT NULL,
    started_at              timestamptz,
    ended_at                timestamptz NOT NULL,
    steps                   integer NOT NULL,
    events                  integer NOT NULL,
    input_tokens            bigint NOT NULL,
    output_tokens           bigint NOT NULL,
    cost_micros             bigint NOT NULL,
    idempotency_key_sha256  bytea,
    reason                  text NOT NULL CHECK (reason IN ('retention', 'request', 'erase')),
    deleted_at              timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, run_id)
);
CREATE UNIQUE INDEX tombstones_by_idempotency_key
    ON tombstones (tenant_id, idempotency_key_sha256)
    WHERE idempotency_key_sha256 IS NOT NULL;
CREATE INDEX tombstones_by_age ON tombstones (tenant_id, deleted_at);
ALTER TABLE tombstones ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON tombstones
    USING (tenant_id = tenantry_current_tenant());
GRANT SELECT ON tombstones TO tenantry_app;

-- 4. One cleaner per tenant at a time: the lease's epoch fences every batch.
CREATE TABLE cleanup_leases (
    tenant_id       text PRIMARY KEY REFERENCES tenants (tenant_id),
    owner           text,
    epoch           bigint NOT NULL DEFAULT 0,
    expires_at      timestamptz,
    last_pass_at    timestamptz,
    last_deleted    bigint NOT NULL DEFAULT 0,
    -- Runs deleted (each left one tombstone) and tombstones expired, ever, kept in the
    -- transactions that do either: their difference is the tenant's tombstones, which
    -- /metrics reads without counting a table that grows for as long as tombstones live.
    deleted_total   bigint NOT NULL DEFAULT 0,
    tombstones_expired bigint NOT NULL DEFAULT 0
);
ALTER TABLE cleanup_leases ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON cleanup_leases
    USING (tenant_id = tenantry_current_tenant());

-- 5. Blobs of deleted runs, deleted after the batch commits (the blob store is not in
--    the transaction): a crash leaves a row here, never a blob without its run's row
--    gone or a run pointing at a deleted blob. Carried out idempotently, retried.
CREATE TABLE blob_deletions (
    tenant_id     text NOT NULL REFERENCES tenants (tenant_id),
    ref           text NOT NULL,
    run_id        uuid NOT NULL,
    queued_at     timestamptz NOT NULL DEFAULT now(),
    attempts      integer NOT NULL DEFAULT 0,
    next_at       timestamptz NOT NULL DEFAULT now(),
    last_error    text,
    PRIMARY KEY (tenant_id, ref)
);
CREATE INDEX blob_deletions_due ON blob_deletions (next_at);
ALTER TABLE blob_deletions ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON blob_deletions
    USING (tenant_id = tenantry_current_tenant());

-- 6. Erasure on request: a job with counts, shown while it runs.
CREATE TABLE erase_jobs (
    job_id          uuid PRIMARY KEY,
    tenant_id       text NOT NULL REFERENCES tenants (tenant_id),
    status          text NOT NULL DEFAULT 'running' CHECK (status IN ('running', 'done')),
    runs_total      bigint NOT NULL DEFAULT 0,
    runs_deleted    bigint NOT NULL DEFAULT 0,
    runs_cancelled  bigint NOT NULL DEFAULT 0,
    secrets_deleted integer NOT NULL DEFAULT 0,
    tool_servers_deleted integer NOT NULL DEFAULT 0,
    blobs_queued    bigint NOT NULL DEFAULT 0,
    requested_by    text NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT now(),
    finished_at     timestamptz
);
ALTER TABLE erase_jobs ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON erase_jobs
    USING (tenant_id = tenantry_current_tenant());
GRANT SELECT, INSERT, UPDATE ON erase_jobs TO tenantry_app;
CREATE INDEX erase_jobs_by_tenant ON erase_jobs (tenant_id, created_at);
CREATE UNIQUE INDEX erase_jobs_one_running ON erase_jobs (tenant_id) WHERE status = 'running';

-- A tenant being erased admits nothing new (the API reads this flag).
ALTER TABLE tenants ADD COLUMN erased_at timestamptz;
GRANT UPDATE (erased_at) ON tenants TO tenantry_app;

-- Candidates of one tenant, oldest end first (coalesce: a dead letter has no finished_at).
CREATE INDEX runs_retention_candidates ON runs (tenant_id, (coalesce(finished_at, updated_at)))
    WHERE status IN ('finished', 'failed', 'cancelled')
       OR (status = 'waiting' AND (error->>'dead_lettered') = 'true');
-- A parent's children (a parent is kept while a child lives).
CREATE INDEX runs_by_parent ON runs (tenant_id, parent_run_id) WHERE parent_run_id IS NOT NULL;
