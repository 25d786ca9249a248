-- Provider model snapshots: a provider may change the model behind a name (`gpt-4o`) while
-- the name stays. Its replies say which snapshot served them (`gpt-4o-2024-08-06`); the
-- worker notes it per agent and model (agents/snapshots.py), the tenant sees a change on
-- the agent, and may hold its runs on the accepted snapshot until it promotes the new one.
--
-- Its functions and triggers are routines now, each the source of its latest definition
-- (src/tenantry/db/routines/, ADR 0037): refuse_frozen, note_model_snapshot,
-- run_for_worker.

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

-- 3. The run as its worker loads it (tenantry_run_for_worker) gains the agent's held
--    snapshots (model_pins): a new result type, so the function of 0029 goes (a database
--    migrated before routines still has it).
DROP FUNCTION IF EXISTS tenantry_run_for_worker(text, uuid);
