-- A worker notes a reply's provider snapshot (ADR 0034) in one round trip, only
-- when it differs from what its process last saw, with the owner of the account that
-- answered (p_owner: 'platform' or 'tenant'; NULL: not known). The first seen is accepted;
-- the accepted or the changed-to one seen on another owner's account adds that owner; any
-- other is a change (the accepted one stays). True: this call noticed a change (counted
-- once, by its noticer).

CREATE OR REPLACE FUNCTION tenantry_note_model_snapshot_v2(
    p_tenant text, p_agent uuid, p_model text, p_seen text, p_owner text)
RETURNS boolean
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, public AS $$
DECLARE
    r record;
    v_owners text[] := CASE WHEN p_owner IS NULL THEN '{}' ELSE ARRAY[p_owner] END;
BEGIN
    PERFORM set_config('tenantry.tenant_id', p_tenant, true);
    INSERT INTO public.agent_model_snapshots (tenant_id, agent_id, model, accepted,
                                              accepted_on)
    VALUES (p_tenant, p_agent, p_model, p_seen, v_owners)
    ON CONFLICT (tenant_id, agent_id, model) DO NOTHING;
    IF FOUND THEN
        RETURN false;  -- the first seen: accepted
    END IF;
    SELECT s.accepted, s.accepted_on, s.changed_to, s.changed_on INTO r
    FROM public.agent_model_snapshots s
    WHERE s.tenant_id = p_tenant AND s.agent_id = p_agent AND s.model = p_model
    FOR UPDATE;
    IF r.accepted = p_seen THEN
        IF NOT v_owners <@ r.accepted_on THEN
            UPDATE public.agent_model_snapshots
            SET accepted_on = r.accepted_on || v_owners, updated_at = now()
            WHERE tenant_id = p_tenant AND agent_id = p_agent AND model = p_model;
        END IF;
        RETURN false;
    END IF;
    IF r.changed_to = p_seen THEN
        IF NOT v_owners <@ r.changed_on THEN
            UPDATE public.agent_model_snapshots
            SET changed_on = r.changed_on || v_owners, updated_at = now()
            WHERE tenant_id = p_tenant AND agent_id = p_agent AND model = p_model;
        END IF;
        RETURN false;
    END IF;
    UPDATE public.agent_model_snapshots
    SET changed_to = p_seen, changed_at = now(), changed_on = v_owners, updated_at = now()
    WHERE tenant_id = p_tenant AND agent_id = p_agent AND model = p_model;
    RETURN true;
END
$$;
REVOKE ALL ON FUNCTION tenantry_note_model_snapshot_v2(text, uuid, text, text, text)
    FROM PUBLIC, tenantry_app, tenantry_console;
GRANT EXECUTE ON FUNCTION tenantry_note_model_snapshot_v2(text, uuid, text, text, text)
    TO tenantry_app;
