-- The console acts (issue 18): a tenant's admissions can be paused, and every operator
-- action (from the console or the operator API) is recorded as who did it.
--
-- Its functions and triggers are routines now, each the source of its latest definition
-- (src/tenantry/db/routines/, ADR 0037): console_record_action, console_actions.

-- A paused tenant admits no new run or task (POST /v1/runs, POST /v1/activity-tasks answer
-- 409 admissions_paused); runs already admitted go on, their tool calls' tasks included.
-- Read by admission's lock query, so the refusal costs no round trip of its own.
ALTER TABLE tenants ADD COLUMN admissions_paused_at timestamptz;
GRANT UPDATE (admissions_paused_at) ON tenants TO tenantry_app;

-- The operator's actions, newest last. Operator-wide (the Actions page lists every
-- tenant's): no role may touch the table itself; the console role records and reads it
-- through two functions (the routines console_record_action and console_actions). `actor`
-- is who: the console session that acted ('console session <id>', a digest of the
-- session's nonce, never the cookie) or 'operator API'. Written after the action, with its outcome ('done', or why it was
-- refused), so a refused attempt is on record too.
CREATE TABLE console_actions (
    action_id  bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at         timestamptz NOT NULL DEFAULT clock_timestamp(),
    actor      text NOT NULL CHECK (length(actor) BETWEEN 1 AND 200),
    action     text NOT NULL CHECK (action IN ('cancel_run', 'approve', 'deny',
                                               'requeue_task', 'revoke_api_key',
                                               'pause_admissions', 'resume_admissions')),
    tenant_id  text NOT NULL,
    target     text NOT NULL CHECK (length(target) <= 200),
    outcome    text NOT NULL CHECK (length(outcome) BETWEEN 1 AND 500),
    detail     text CHECK (length(detail) <= 2000)
);
CREATE INDEX console_actions_tenant ON console_actions (tenant_id, action_id);
REVOKE ALL ON console_actions FROM PUBLIC;
-- Like every table with a tenant column (ADR 0003): were a role ever granted it, it would
-- see one tenant's rows only. The two functions run as the owner.
ALTER TABLE console_actions ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON console_actions
    USING (tenant_id = tenantry_current_tenant());
