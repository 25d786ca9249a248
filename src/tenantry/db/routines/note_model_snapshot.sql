-- The previous release's note of a reply's provider snapshot, without the owner of the
-- account that answered: the same rule as tenantry_note_model_snapshot_v2, owner not known
-- (a change then clears the owners of the one it replaces). Kept while workers of that
-- release may still call it.

CREATE OR REPLACE FUNCTION tenantry_note_model_snapshot(p_tenant text, p_agent uuid,
                                                        p_model text, p_seen text)
RETURNS boolean
LANGUAGE sql VOLATILE SET search_path = pg_catalog, public AS $$
    SELECT public.tenantry_note_model_snapshot_v2(p_tenant, p_agent, p_model, p_seen, NULL)
$$;
REVOKE ALL ON FUNCTION tenantry_note_model_snapshot(text, uuid, text, text)
    FROM PUBLIC, tenantry_app, tenantry_console;
GRANT EXECUTE ON FUNCTION tenantry_note_model_snapshot(text, uuid, text, text) TO tenantry_app;
