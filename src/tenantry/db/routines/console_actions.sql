-- The operator's recorded actions (console_actions), newest first, one tenant's or every
-- tenant's; p_before is the last id of the previous page. The console role's alone.

CREATE OR REPLACE FUNCTION tenantry_console_actions(
    p_tenant text, p_before bigint, p_limit integer)
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
REVOKE ALL ON FUNCTION tenantry_console_actions(text, bigint, integer)
    FROM PUBLIC, tenantry_app, tenantry_console;
GRANT EXECUTE ON FUNCTION tenantry_console_actions(text, bigint, integer) TO tenantry_console;
