-- Records an operator's action (from the console or the operator API) after it
-- was attempted, with its outcome ('done', or why it was refused), so a refused attempt is
-- on record too. No role may touch console_actions itself; the console role records through
-- this function and reads through tenantry_console_actions.

CREATE OR REPLACE FUNCTION tenantry_console_record_action(
    p_actor text, p_action text, p_tenant text, p_target text, p_outcome text, p_detail text)
RETURNS bigint
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, public AS $$
    INSERT INTO public.console_actions (actor, action, tenant_id, target, outcome, detail)
    VALUES (p_actor, p_action, p_tenant, p_target, left(p_outcome, 500), left(p_detail, 2000))
    RETURNING action_id
$$;
REVOKE ALL ON FUNCTION tenantry_console_record_action(text, text, text, text, text, text)
    FROM PUBLIC, tenantry_app, tenantry_console;
GRANT EXECUTE ON FUNCTION tenantry_console_record_action(text, text, text, text, text, text)
    TO tenantry_console;
