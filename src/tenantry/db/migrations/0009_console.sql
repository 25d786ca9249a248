-- The operator console (docs/decisions/0006-operator-console.md): its cross-tenant reads.
-- Like the operator usage report, each is a definer function that returns only the
-- columns the console shows (never run inputs, answers, secrets or keys), one bounded
-- page at a time. Reads of one run go through the tenant's own transaction and RLS.
--
-- Its functions and triggers are routines now, each the source of its latest definition
-- (src/tenantry/db/routines/, ADR 0037): console_runs, console_pending_approvals,
-- console_tenants.

-- Newest runs of every tenant: keyset pages on run_id (UUIDv7, creation order).
CREATE INDEX runs_console_recent ON runs (run_id);
CREATE INDEX runs_console_by_status ON runs (status, run_id);
-- The inbox across tenants, oldest request first (approval ids are UUIDv7 too).
CREATE INDEX approvals_console_pending ON approvals (approval_id) WHERE status = 'pending';
