-- Evaluation data follows the runs it came from, and reports are read in bounded work
-- (issue 35 item 5, ADR 0034).
--
-- Its functions and triggers are routines now, each the source of its latest definition
-- (src/tenantry/db/routines/, ADR 0037): refuse_frozen, retention_batch.

-- 1. What a test case copied from a run (`from_run`): the run's input (when the case took
--    it) and the results its tool calls got, in a row of their own keyed by the run, so
--    that deleting the run — retention, DELETE /v1/runs/{id}, a tenant's erasure, all
--    through tenantry_retention_batch — deletes the copy in the same transaction. The
--    case in agent_test_sets keeps only what the tenant wrote and the run's id.
CREATE TABLE test_case_sources (
    tenant_id    text NOT NULL,
    test_set_id  uuid NOT NULL,
    case_index   integer NOT NULL CHECK (case_index >= 0),
    run_id       uuid NOT NULL,  -- no foreign key: retention deletes runs, and this with them
    input        jsonb,          -- the run's input, when the case has none of its own
    recorded     jsonb NOT NULL DEFAULT '[]',  -- [{tool, arguments, result | error}]
    PRIMARY KEY (tenant_id, test_set_id, case_index),
    FOREIGN KEY (tenant_id, test_set_id) REFERENCES agent_test_sets (tenant_id, test_set_id)
);
-- A deleted run's copies, found by the run (the retention batch's DELETE).
CREATE INDEX test_case_sources_by_run ON test_case_sources (tenant_id, run_id);

-- Test sets made before this release hold the copy inline in the case. The tenant's own
-- input and recordings can no longer be told from the run's there, so the case's whole
-- input and recordings become the copy (the conservative reading: they go with the run);
-- where the run is already gone, they go now.
INSERT INTO test_case_sources (tenant_id, test_set_id, case_index, run_id, input, recorded)
SELECT t.tenant_id, t.test_set_id, (c.n - 1)::integer, substr(c.value->>'from_run', 5)::uuid,
       c.value->'input', coalesce(c.value->'recorded', '[]')
FROM agent_test_sets t
CROSS JOIN LATERAL jsonb_array_elements(t.cases) WITH ORDINALITY AS c (value, n)
WHERE c.value ? 'from_run'
  AND EXISTS (SELECT 1 FROM runs r WHERE r.tenant_id = t.tenant_id
              AND r.run_id = substr(c.value->>'from_run', 5)::uuid);
UPDATE agent_test_sets t
SET cases = (SELECT jsonb_agg(CASE WHEN c.value ? 'from_run'
                                   THEN (c.value - 'input') || '{"recorded": []}'
                                   ELSE c.value END ORDER BY c.n)
             FROM jsonb_array_elements(t.cases) WITH ORDINALITY AS c (value, n))
WHERE EXISTS (SELECT 1 FROM jsonb_array_elements(t.cases) AS c (value)
              WHERE c.value ? 'from_run');

-- 2. How many cases a test set has, so that a list of test sets reads no case at all.
--    (Null in a row written by the previous release: the list counts the cases then.)
ALTER TABLE agent_test_sets ADD COLUMN case_count integer CHECK (case_count >= 0);
UPDATE agent_test_sets SET case_count = jsonb_array_length(cases);

-- 3. A side's verdicts, computed once, at the first read of the report after its run
--    ended: later reads use these and never read the run's events again. The tool calls
--    it reports are the first few, with their total and a digest of them all (what
--    `differences` compares). Deleted with the run (the retention batch), like any state of
--    the run.
CREATE TABLE evaluation_results (
    tenant_id          text NOT NULL,
    run_id             uuid NOT NULL,
    evaluation_id      uuid NOT NULL,
    status             text NOT NULL,  -- how the run ended
    passed             boolean NOT NULL,
    verdicts           jsonb NOT NULL,  -- [{check, passed, detail}]
    tool_calls         jsonb NOT NULL,  -- the first of them: [{tool, arguments, outcome}]
    tool_calls_total   integer NOT NULL CHECK (tool_calls_total >= 0),
    tool_calls_sha256  bytea NOT NULL,  -- of every (tool, arguments), in order
    computed_at        timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, run_id),
    FOREIGN KEY (tenant_id, run_id) REFERENCES evaluation_runs (tenant_id, run_id)
);

DO $$
DECLARE
    t text;
BEGIN
    FOREACH t IN ARRAY ARRAY['test_case_sources', 'evaluation_results'] LOOP
        EXECUTE format('ALTER TABLE %I ENABLE ROW LEVEL SECURITY', t);
        EXECUTE format('CREATE POLICY tenant_isolation ON %I '
                       'USING (tenant_id = tenantry_current_tenant())', t);
        -- Written once, never changed: only the retention batch (a definer) deletes.
        EXECUTE format('GRANT SELECT, INSERT ON %I TO tenantry_app', t);
    END LOOP;
END
$$;
