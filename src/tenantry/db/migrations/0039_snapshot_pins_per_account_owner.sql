-- A held provider snapshot is sent only on accounts of the owner whose account reported it
-- (issue 35, ADR 0034): a tenant's own (bring-your-own-key) account may report any id at
-- all, and a snapshot id it reported must never go out on a platform account — billed at
-- the platform's price for the model's name — nor a platform-reported one on the tenant's.

-- 1. Per snapshot, the owners of the accounts that reported it: 'platform' (an operator's
--    account) and/or 'tenant' (the tenant's own). Empty: not known (noted by a release
--    before this one); such a snapshot is held on no account until an account reports it.
ALTER TABLE agent_model_snapshots
    ADD COLUMN accepted_on text[] NOT NULL DEFAULT '{}'
        CHECK (accepted_on <@ ARRAY['platform', 'tenant']),
    ADD COLUMN changed_on text[] NOT NULL DEFAULT '{}'
        CHECK (changed_on <@ ARRAY['platform', 'tenant']);
-- What was noted before: a tenant that never had an account of its own can only have been
-- answered on platform accounts. Another tenant's snapshots stay unknown (the log says which
-- account answered, but reading every run's replies is no migration's work): its holds
-- apply again once its accounts report the snapshot.
UPDATE agent_model_snapshots s
SET accepted_on = ARRAY['platform'],
    changed_on = CASE WHEN s.changed_to IS NULL THEN '{}' ELSE ARRAY['platform'] END
WHERE NOT EXISTS (SELECT 1 FROM model_accounts a WHERE a.tenant_id = s.tenant_id);

-- 2. Owners follow their snapshot id: a promotion makes the accepted snapshot the one that
--    was the change, reported by the change's owners (any other id: by none known), and a
--    cleared change has none. Here rather than in each statement: the previous release's
--    promote, which knows nothing of owners, is kept to the rule too.
CREATE FUNCTION tenantry_snapshot_owners_follow() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.accepted IS DISTINCT FROM OLD.accepted THEN
        NEW.accepted_on := CASE WHEN NEW.accepted = OLD.changed_to THEN OLD.changed_on
                                ELSE '{}' END;
    END IF;
    IF NEW.changed_to IS NULL THEN
        NEW.changed_on := '{}';
    END IF;
    RETURN NEW;
END
$$;
CREATE TRIGGER agent_model_snapshots_owners_follow BEFORE UPDATE ON agent_model_snapshots
    FOR EACH ROW EXECUTE FUNCTION tenantry_snapshot_owners_follow();

-- 3. A worker notes a reply's snapshot with the owner of the account that answered
--    (p_owner; NULL: not known). The first seen is accepted; the accepted or the changed-to
--    one seen on another owner's account adds that owner; any other is a change (the
--    accepted one stays). True: this call noticed a change (counted once, by its noticer).
CREATE FUNCTION tenantry_note_model_snapshot_v2(p_tenant text, p_agent uuid, p_model text,
                                                p_seen text, p_owner text)
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
    FROM PUBLIC;
GRANT EXECUTE ON FUNCTION tenantry_note_model_snapshot_v2(text, uuid, text, text, text)
    TO tenantry_app;

-- The previous release's workers note without an owner: the same rule, owner not known
-- (their change then clears the owners of the one it replaces).
CREATE OR REPLACE FUNCTION tenantry_note_model_snapshot(p_tenant text, p_agent uuid,
                                                        p_model text, p_seen text)
RETURNS boolean
LANGUAGE sql VOLATILE SET search_path = pg_catalog, public AS $$
    SELECT public.tenantry_note_model_snapshot_v2(p_tenant, p_agent, p_model, p_seen, NULL)
$$;

-- 4. The run as its worker loads it (0037), with the agent's held snapshots and the owners
--    of the accounts that reported each (snapshot_pins: model → {snapshot, on}). model_pins,
--    which the previous release's workers send on any account, keeps only the snapshots a
--    platform account reported: on those workers a tenant-reported one is not held at all.
DROP FUNCTION tenantry_run_for_worker(text, uuid);
CREATE FUNCTION tenantry_run_for_worker(p_tenant text, p_run uuid)
RETURNS TABLE (agent_id uuid, agent_version integer, input jsonb, status text,
               lease_epoch bigint, region text, plan text, created_at timestamptz,
               started_at timestamptz, spec jsonb, tool_pins jsonb, model_pins jsonb,
               snapshot_pins jsonb)
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, public AS $$
BEGIN
    PERFORM set_config('tenantry.tenant_id', p_tenant, true);
    RETURN QUERY
    SELECT r.agent_id, r.agent_version, r.input, r.status, r.lease_epoch, t.region, t.plan,
           r.created_at, r.started_at, v.spec, v.tool_pins,
           coalesce(p.model_pins, '{}'::jsonb), coalesce(p.snapshot_pins, '{}'::jsonb)
    FROM public.runs r
    JOIN public.tenants t ON t.tenant_id = r.tenant_id
    JOIN public.agent_versions v ON v.tenant_id = r.tenant_id AND v.agent_id = r.agent_id
                                AND v.version = r.agent_version
    LEFT JOIN LATERAL (
        SELECT jsonb_object_agg(s.model, s.accepted)
                   FILTER (WHERE 'platform' = ANY (s.accepted_on)) AS model_pins,
               jsonb_object_agg(s.model, jsonb_build_object('snapshot', s.accepted,
                                                            'on', to_jsonb(s.accepted_on)))
                   AS snapshot_pins
        FROM public.agent_model_snapshots s
        WHERE s.tenant_id = r.tenant_id AND s.agent_id = r.agent_id AND s.held
    ) p ON true
    WHERE r.tenant_id = p_tenant AND r.run_id = p_run;
END
$$;
REVOKE ALL ON FUNCTION tenantry_run_for_worker(text, uuid) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION tenantry_run_for_worker(text, uuid) TO tenantry_app;
