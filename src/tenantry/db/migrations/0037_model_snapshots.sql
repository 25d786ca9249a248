-- Provider model snapshots: a provider may change the model behind a name (`gpt-4o`) while
-- the name stays. Its replies say which snapshot served them (`gpt-4o-2024-08-06`); the
-- worker notes it per agent and model (agents/snapshots.py), the tenant sees a change on
-- the agent, and may hold its runs on the accepted snapshot until it promotes the new one.

-- 1. Per agent and platform model: the snapshot accepted (the first one seen, or the one
--    the tenant promoted), a different one seen since (if any), and whether the agent's runs
--    ask for the accepted one by its id (held) instead of the model's name.
CREATE TABLE agent_model_snapshots (
    tenant_id    text NOT NULL,
    agent_id     uuid NOT NULL,
    model        text NOT NULL CHECK (octet_length(model) BETWEEN 1 AND 800),
    accepted     text NOT NULL CHECK (octet_length(accepted) BETWEEN 1 AND 800),
    accepted_at  timestamptz NOT NULL DEFAULT now(),
    changed_to   text CHECK (octet_length(changed_to) BETWEEN 1 AND 800),
    changed_at   timestamptz,
    held         boolean NOT NULL DEFAULT false,
    updated_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, agent_id, model),
    FOREIGN KEY (tenant_id, agent_id) REFERENCES agents (tenant_id, agent_id),
    CHECK ((changed_to IS NULL) = (changed_at IS NULL)),
    CHECK (changed_to <> accepted)
);
ALTER TABLE agent_model_snapshots ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON agent_model_snapshots
    USING (tenant_id = tenantry_current_tenant());
GRANT SELECT, INSERT, UPDATE ON agent_model_snapshots TO tenantry_app;

-- 2. Who promoted which snapshot, when (append-only: the app role cannot change a row).
CREATE TABLE agent_model_snapshot_promotions (
    tenant_id       text NOT NULL,
    agent_id        uuid NOT NULL,
    model           text NOT NULL,
    promotion_id    uuid NOT NULL,
    previous        text NOT NULL,  -- the snapshot accepted before
    provider_model  text NOT NULL,  -- the snapshot accepted since
    promoted_by     uuid NOT NULL,  -- the API key that asked
    promoted_at     timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, agent_id, model, promotion_id),
    FOREIGN KEY (tenant_id, agent_id, model)
        REFERENCES agent_model_snapshots (tenant_id, agent_id, model)
);
ALTER TABLE agent_model_snapshot_promotions ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON agent_model_snapshot_promotions
    USING (tenant_id = tenantry_current_tenant());
GRANT SELECT, INSERT ON agent_model_snapshot_promotions TO tenantry_app;

-- A tenant being moved to another cell: neither changes under the copy (migration 0031).
CREATE TRIGGER agent_model_snapshots_refuse_frozen BEFORE INSERT OR UPDATE
    ON agent_model_snapshots FOR EACH ROW EXECUTE FUNCTION tenantry_refuse_frozen();
CREATE TRIGGER agent_model_snapshot_promotions_refuse_frozen BEFORE INSERT OR UPDATE
    ON agent_model_snapshot_promotions FOR EACH ROW EXECUTE FUNCTION tenantry_refuse_frozen();

-- 3. The worker notes a reply's snapshot in one round trip (only when it differs from what
--    its process last saw). The first seen is accepted; another one is a change (the
--    accepted one stays). True: this call noticed a change (counted once, by its noticer).
CREATE FUNCTION tenantry_note_model_snapshot(p_tenant text, p_agent uuid, p_model text,
                                             p_seen text)
RETURNS boolean
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, public AS $$
DECLARE
    v_changed boolean;
BEGIN
    PERFORM set_config('tenantry.tenant_id', p_tenant, true);
    INSERT INTO public.agent_model_snapshots AS s (tenant_id, agent_id, model, accepted)
    VALUES (p_tenant, p_agent, p_model, p_seen)
    ON CONFLICT (tenant_id, agent_id, model) DO UPDATE
        SET changed_to = EXCLUDED.accepted, changed_at = now(), updated_at = now()
        WHERE s.accepted <> EXCLUDED.accepted
          AND s.changed_to IS DISTINCT FROM EXCLUDED.accepted
    RETURNING s.changed_to IS NOT NULL INTO v_changed;
    RETURN coalesce(v_changed, false);
END
$$;
REVOKE ALL ON FUNCTION tenantry_note_model_snapshot(text, uuid, text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION tenantry_note_model_snapshot(text, uuid, text, text)
    TO tenantry_app;

-- 4. The run as its worker loads it (migration 0029), plus the agent's held snapshots
--    (platform model → snapshot id to ask for): read with the run, never per step.
DROP FUNCTION tenantry_run_for_worker(text, uuid);
CREATE FUNCTION tenantry_run_for_worker(p_tenant text, p_run uuid)
RETURNS TABLE (agent_id uuid, agent_version integer, input jsonb, status text,
               lease_epoch bigint, region text, plan text, created_at timestamptz,
               started_at timestamptz, spec jsonb, tool_pins jsonb, model_pins jsonb)
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, public AS $$
BEGIN
    PERFORM set_config('tenantry.tenant_id', p_tenant, true);
    RETURN QUERY
    SELECT r.agent_id, r.agent_version, r.input, r.status, r.lease_epoch, t.region, t.plan,
           r.created_at, r.started_at, v.spec, v.tool_pins,
           (SELECT coalesce(jsonb_object_agg(s.model, s.accepted), '{}'::jsonb)
            FROM public.agent_model_snapshots s
            WHERE s.tenant_id = r.tenant_id AND s.agent_id = r.agent_id AND s.held)
    FROM public.runs r
    JOIN public.tenants t ON t.tenant_id = r.tenant_id
    JOIN public.agent_versions v ON v.tenant_id = r.tenant_id AND v.agent_id = r.agent_id
                                AND v.version = r.agent_version
    WHERE r.tenant_id = p_tenant AND r.run_id = p_run;
END
$$;
REVOKE ALL ON FUNCTION tenantry_run_for_worker(text, uuid) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION tenantry_run_for_worker(text, uuid) TO tenantry_app;
