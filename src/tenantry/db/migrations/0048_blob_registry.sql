-- Every blob is a row (issue 40, ADR 0042): which run it belongs to, what it holds and how
-- many bytes, written before the object itself (blobs/store.py). So a run's deletion finds
-- every blob of it here, not by reading its events (a ToolCompleted over 8 KiB keeps its
-- fields in run_event_payloads, where the old scan never looked), and a tenant's usage is
-- one counted row, not a listing of its folder or bucket at every write.
-- Expand only: two new tables; the previous release neither reads nor needs them.

-- 1. One row per blob, before its object exists and until after it is deleted: a crash
--    between leaves a row without an object (deleted with its run), never an object
--    without a row. The ref names its run (a call's key, `sandbox-<run>`,
--    `screenshot-<run>`) and is content addressed (`<name>.<sha256 prefix>`), so two
--    runs never share one and a retried write is the same blob.
CREATE TABLE blobs (
    tenant_id   text NOT NULL,
    ref         text NOT NULL,
    run_id      uuid NOT NULL,
    kind        text NOT NULL CHECK (kind IN ('tool_output', 'sandbox_files', 'screenshot')),
    bytes       bigint NOT NULL CHECK (bytes >= 0),
    created_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, ref)
);
CREATE INDEX blobs_by_run ON blobs (tenant_id, run_id);
ALTER TABLE blobs ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON blobs USING (tenant_id = tenantry_current_tenant());
GRANT SELECT, INSERT, DELETE ON blobs TO tenantry_app;

-- 2. A tenant's bytes: the sum of its rows' bytes, kept with every insert and delete in
--    the same transaction (the quota check takes this row's lock, so writers of one tenant
--    cannot overshoot together).
CREATE TABLE blob_usage (
    tenant_id   text PRIMARY KEY,
    bytes       bigint NOT NULL DEFAULT 0 CHECK (bytes >= 0)
);
ALTER TABLE blob_usage ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON blob_usage USING (tenant_id = tenantry_current_tenant());
GRANT SELECT, INSERT, UPDATE ON blob_usage TO tenantry_app;
