-- Agent test sets, evaluations and opt-in promotion (issue 23, ADR 0034).
--
-- Its functions and triggers are routines now, each the source of its latest definition
-- (src/tenantry/db/routines/, ADR 0037): create_runs (a run without a
-- version gets the agent's live one), refuse_frozen (on the new tables).

-- 1. The live version: what a run without an explicit version uses. Publishing no longer
--    changes it; promoting does. Existing agents keep what they ran (their latest).
ALTER TABLE agents ADD COLUMN live_version integer;
UPDATE agents SET live_version = latest_version;
ALTER TABLE agents ALTER COLUMN live_version SET NOT NULL;
ALTER TABLE agents ADD CONSTRAINT agents_live_version_published
    CHECK (live_version >= 1 AND live_version <= latest_version);

-- Who made which version live, when, and on what evidence (an evaluation, or none).
CREATE TABLE agent_promotions (
    tenant_id         text NOT NULL,
    agent_id          uuid NOT NULL,
    promotion_id      uuid NOT NULL,
    version           integer NOT NULL,
    previous_version  integer NOT NULL,
    promoted_by       text NOT NULL,  -- the API key's id, or "operator"
    evaluation_id     uuid,
    promoted_at       timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, promotion_id),
    FOREIGN KEY (tenant_id, agent_id, version)
        REFERENCES agent_versions (tenant_id, agent_id, version)
);
CREATE INDEX agent_promotions_by_agent ON agent_promotions (tenant_id, agent_id, promoted_at);

-- 2. Test sets: cases (input, mechanical checks, recorded tool results) for one agent.
--    Immutable once created: an evaluation names the exact cases it ran.
CREATE TABLE agent_test_sets (
    tenant_id     text NOT NULL,
    test_set_id   uuid NOT NULL,
    agent_id      uuid NOT NULL,
    name          text NOT NULL,
    tool_results  text NOT NULL CHECK (tool_results IN ('recorded', 'live')),
    stubs         jsonb NOT NULL DEFAULT '{}',
    cases         jsonb NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, test_set_id),
    UNIQUE (tenant_id, agent_id, name),
    FOREIGN KEY (tenant_id, agent_id) REFERENCES agents (tenant_id, agent_id)
);

-- 3. Evaluations: every case run on the baseline and on the candidate as ordinary runs.
--    Results are read from the runs themselves (nothing is copied), so a run deleted by
--    retention shows as deleted.
CREATE TABLE agent_evaluations (
    tenant_id          text NOT NULL,
    evaluation_id      uuid NOT NULL,
    agent_id           uuid NOT NULL,
    test_set_id        uuid NOT NULL,
    baseline_version   integer NOT NULL,
    candidate_version  integer NOT NULL,
    candidate_model    text,  -- the candidate's model override, if any
    cases              integer NOT NULL,
    created_by         text NOT NULL,
    created_at         timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, evaluation_id),
    FOREIGN KEY (tenant_id, test_set_id) REFERENCES agent_test_sets (tenant_id, test_set_id),
    FOREIGN KEY (tenant_id, agent_id, baseline_version)
        REFERENCES agent_versions (tenant_id, agent_id, version),
    FOREIGN KEY (tenant_id, agent_id, candidate_version)
        REFERENCES agent_versions (tenant_id, agent_id, version)
);
CREATE INDEX agent_evaluations_by_agent ON agent_evaluations (tenant_id, agent_id, created_at);

CREATE TABLE evaluation_runs (
    tenant_id      text NOT NULL,
    evaluation_id  uuid NOT NULL,
    case_index     integer NOT NULL CHECK (case_index >= 0),
    side           text NOT NULL CHECK (side IN ('baseline', 'candidate')),
    run_id         uuid NOT NULL,  -- no foreign key: retention deletes runs
    PRIMARY KEY (tenant_id, evaluation_id, case_index, side),
    FOREIGN KEY (tenant_id, evaluation_id)
        REFERENCES agent_evaluations (tenant_id, evaluation_id)
);
-- A run's worker finds what its evaluation asks of its tool calls by the run.
CREATE UNIQUE INDEX evaluation_runs_by_run ON evaluation_runs (tenant_id, run_id);

-- Activities and task types are rows of `agents` too: their versions are chosen by
-- number or latest, never by a live version; theirs stays 1.
ALTER TABLE agents ALTER COLUMN live_version SET DEFAULT 1;

DO $$
DECLARE
    t text;
BEGIN
    FOREACH t IN ARRAY ARRAY['agent_promotions', 'agent_test_sets', 'agent_evaluations',
                             'evaluation_runs'] LOOP
        EXECUTE format('ALTER TABLE %I ENABLE ROW LEVEL SECURITY', t);
        EXECUTE format('CREATE POLICY tenant_isolation ON %I '
                       'USING (tenant_id = tenantry_current_tenant())', t);
        EXECUTE format('GRANT SELECT, INSERT ON %I TO tenantry_app', t);
    END LOOP;
END
$$;
