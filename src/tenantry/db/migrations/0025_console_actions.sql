-- The console acts (issue 18): a tenant's admissions can be paused, and every operator
-- action (from the console or the operator API) is recorded as who did it.

-- A paused tenant admits no new run or task (POST /v1/runs, POST /v1/activity-tasks answer
-- 409 admissions_paused); runs already admitted go on, their tool calls' tasks included.
-- Read by admission's lock query, so the refusal costs no round trip of its own.
ALTER TABLE tenants ADD COLUMN admissions_paused_at timestamptz;
GRANT UPDATE (admissions_paused_at) ON tenants TO tenantry_app;

-- The operator's actions, newest last. Operator-wide (the Actions page lists every
-- tenant's): no role may touch the table itself; the console role records and reads it
-- through the two functions below. `actor` is who: the console session that acted
-- ('console session <id>', a digest of the session's nonce, never the cookie) or
-- 'operator API'. Written after the action, with its outcome ('done', or why it was
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
-- see one tenant's rows only. The functions below run as the owner.
ALTER TABLE console_actions ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON console_actions
    USING (tenant_id = tenantry_current_tenant());

CREATE FUNCTION tenantry_console_record_action(p_actor text, p_action text, p_tenant text,
                                               p_target text, p_outcome text, p_detail text)
RETURNS bigint
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, public AS $$
    INSERT INTO public.console_actions (actor, action, tenant_id, target, outcome, detail)
    VALUES (p_actor, p_action, p_tenant, p_target, left(p_outcome, 500), left(p_detail, 2000))
    RETURNING action_id
$$;

-- Newest first, one tenant's or every tenant's; p_before is the last id of the previous page.
CREATE FUNCTION tenantry_console_actions(p_tenant text, p_before bigint, p_limit integer)
RETURNS TABLE (action_id bigint, at timestamptz, actor text, action text, tenant_id text,
               target text, outcome text, detail text)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public AS $$
    SELECT a.action_id, a.at, a.actor, a.action, a.tenant_id, a.target, a.outcome, a.detail
    FROM public.console_actions a
    WHERE (p_tenant IS NULL OR a.tenant_id = p_tenant)
      AND (p_before IS NULL OR a.action_id < p_before)
    ORDER BY a.action_id DESC
    LIMIT least(greatest(p_limit, 1), 200)
$$;

REVOKE ALL ON FUNCTION tenantry_console_record_action(text, text, text, text, text, text)
    FROM PUBLIC;
REVOKE ALL ON FUNCTION tenantry_console_actions(text, bigint, integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION tenantry_console_record_action(text, text, text, text, text, text)
    TO tenantry_console;
GRANT EXECUTE ON FUNCTION tenantry_console_actions(text, bigint, integer) TO tenantry_console;
