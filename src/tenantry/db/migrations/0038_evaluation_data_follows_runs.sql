-- Evaluation data follows the runs it came from, and reports are read in bounded work
-- (issue 35 item 5, ADR 0034).

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
--    `differences` compares). Deleted with the run (below), like any state of the run.
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
        -- A tenant being moved to another cell is written by nobody (0031).
        EXECUTE format('CREATE TRIGGER %I BEFORE INSERT OR UPDATE ON %I FOR EACH ROW '
                       'EXECUTE FUNCTION tenantry_refuse_frozen()', t || '_refuse_frozen', t);
    END LOOP;
END
$$;

-- 4. The batch of 0035, deleting two more kinds of a run's dependent state: what test
--    cases copied from it and the verdicts stored for it. The generic plan of 0032 is set
--    again (a replaced function takes only the SET clauses its new definition names).
CREATE OR REPLACE FUNCTION tenantry_retention_batch(
    p_tenant text, p_owner text, p_epoch bigint, p_cutoff timestamptz, p_limit integer,
    p_reason text, p_run uuid DEFAULT NULL, p_blobs boolean DEFAULT true)
RETURNS TABLE (runs integer, events bigint, blobs integer)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public
-- The exemption of the immutability triggers, for this call only (a SET clause ends with
-- the call, even an aborted one; a set_config would last the caller's whole transaction).
SET tenantry.retention = 'on' AS $$
DECLARE
    v_runs uuid[];
    v_statuses text[];
    v_events bigint;
    v_blobs integer := 0;
BEGIN
    -- One run on request (p_run, no epoch) needs no lease: it is no stale cleaner, and
    -- the run's row lock keeps it and a cleaner from deleting the same run twice.
    IF p_epoch IS NOT NULL OR p_run IS NULL THEN
        PERFORM 1 FROM public.cleanup_leases l
        WHERE l.tenant_id = p_tenant AND l.owner = p_owner AND l.epoch = p_epoch
          AND l.expires_at > clock_timestamp()
        FOR UPDATE;
        IF NOT FOUND THEN
            RAISE EXCEPTION 'cleanup lease of tenant % epoch % is no longer held',
                p_tenant, p_epoch USING ERRCODE = 'TR001';
        END IF;
    END IF;

    SELECT array_agg(c.run_id), array_agg(c.status) INTO v_runs, v_statuses FROM (
        SELECT r.run_id, r.status FROM public.runs r
        WHERE r.tenant_id = p_tenant
          AND (p_run IS NULL OR r.run_id = p_run)
          AND (r.status IN ('finished', 'failed', 'cancelled')
               OR (r.status = 'waiting' AND (r.error->>'dead_lettered') = 'true'))
          AND coalesce(r.finished_at, r.updated_at) < p_cutoff
          AND (r.webhook_state IS DISTINCT FROM 'pending')
          AND NOT EXISTS (
              SELECT 1 FROM public.runs c
              WHERE c.tenant_id = r.tenant_id AND c.parent_run_id = r.run_id
                AND NOT (c.status IN ('finished', 'failed', 'cancelled')
                         OR (c.status = 'waiting' AND (c.error->>'dead_lettered') = 'true')))
          AND NOT EXISTS (
              SELECT 1 FROM public.approvals a
              WHERE a.tenant_id = r.tenant_id AND a.run_id = r.run_id AND a.status = 'pending')
        ORDER BY coalesce(r.finished_at, r.updated_at)
        LIMIT p_limit
        FOR UPDATE OF r SKIP LOCKED
    ) c;
    IF v_runs IS NULL THEN
        RETURN QUERY SELECT 0, 0::bigint, 0;
        RETURN;
    END IF;

    INSERT INTO public.tombstones (
        tenant_id, run_id, kind, agent_id, agent_version, parent_run_id, status,
        created_at, started_at, ended_at, steps, events, input_tokens, output_tokens,
        cost_micros, idempotency_key_sha256, reason)
    SELECT r.tenant_id, r.run_id, r.kind, r.agent_id, r.agent_version, r.parent_run_id,
           CASE WHEN r.status = 'waiting' THEN 'dead_lettered' ELSE r.status END,
           r.created_at, r.started_at, coalesce(r.finished_at, r.updated_at), r.steps,
           r.last_seq, r.input_tokens, r.output_tokens, r.cost_micros,
           CASE WHEN r.idempotency_key IS NULL THEN NULL
                ELSE sha256(convert_to(r.idempotency_key, 'UTF8')) END,
           p_reason
    FROM public.runs r WHERE r.tenant_id = p_tenant AND r.run_id = ANY (v_runs);

    IF p_blobs THEN
        INSERT INTO public.blob_deletions (tenant_id, ref, run_id)
        SELECT DISTINCT ON (b.ref) p_tenant, b.ref, b.run_id FROM (
            SELECT e.run_id, e.data->>'output_ref' AS ref FROM public.run_events e
            WHERE e.tenant_id = p_tenant AND e.run_id = ANY (v_runs)
              AND e.type = 'ToolCompleted' AND e.data ? 'output_ref'
            UNION ALL
            SELECT e.run_id, e.data->>'ref' FROM public.run_events e
            WHERE e.tenant_id = p_tenant AND e.run_id = ANY (v_runs)
              AND e.type = 'SandboxSaved'
            UNION ALL
            -- What a call stored besides its output (a browser's screenshots).
            SELECT e.run_id, jsonb_array_elements_text(e.data->'blob_refs')
            FROM public.run_events e
            WHERE e.tenant_id = p_tenant AND e.run_id = ANY (v_runs)
              AND e.type = 'ToolCompleted' AND e.data ? 'blob_refs'
        ) b WHERE b.ref IS NOT NULL
        ON CONFLICT (tenant_id, ref) DO NOTHING;
        GET DIAGNOSTICS v_blobs = ROW_COUNT;
    END IF;

    DELETE FROM public.run_event_payloads p
    WHERE p.tenant_id = p_tenant AND p.run_id = ANY (v_runs);
    DELETE FROM public.run_events e WHERE e.tenant_id = p_tenant AND e.run_id = ANY (v_runs);
    GET DIAGNOSTICS v_events = ROW_COUNT;
    DELETE FROM public.approvals a WHERE a.tenant_id = p_tenant AND a.run_id = ANY (v_runs);
    DELETE FROM public.budget_reservations b
    WHERE b.tenant_id = p_tenant AND b.run_id = ANY (v_runs);
    -- Copies of the run's input and tool results in test cases made from it, and the
    -- verdicts stored for it as an evaluation's run (ADR 0034): they go with the run.
    DELETE FROM public.test_case_sources s
    WHERE s.tenant_id = p_tenant AND s.run_id = ANY (v_runs);
    DELETE FROM public.evaluation_results x
    WHERE x.tenant_id = p_tenant AND x.run_id = ANY (v_runs);
    DELETE FROM public.runs r WHERE r.tenant_id = p_tenant AND r.run_id = ANY (v_runs);
    -- What runs_count_ended_deleted leaves to us (see there); last, so that the totals'
    -- row locks are held only to the commit.
    UPDATE public.run_status_totals t SET runs = t.runs - d.n
    FROM (SELECT x.status, count(*) AS n FROM unnest(v_statuses) AS x (status)
          WHERE x.status IN ('finished', 'failed', 'cancelled') GROUP BY x.status) d
    WHERE t.tenant_id = p_tenant AND t.status = d.status;

    -- The end of the batch: still ours by the clock? (A batch that outlived its lease
    -- rolls back; the next holder does it again.)
    PERFORM 1 FROM public.cleanup_leases l
    WHERE l.tenant_id = p_tenant AND l.epoch = p_epoch AND l.expires_at > clock_timestamp();
    IF NOT FOUND AND p_epoch IS NOT NULL THEN
        RAISE EXCEPTION 'cleanup lease of tenant % epoch % expired during the batch',
            p_tenant, p_epoch USING ERRCODE = 'TR001';
    END IF;
    INSERT INTO public.cleanup_leases AS l (tenant_id, deleted_total)
    VALUES (p_tenant, cardinality(v_runs))
    ON CONFLICT (tenant_id) DO UPDATE SET deleted_total = l.deleted_total + cardinality(v_runs);
    RETURN QUERY SELECT cardinality(v_runs), v_events, v_blobs;
END
$$;

ALTER FUNCTION tenantry_retention_batch(text, text, bigint, timestamptz, integer, text, uuid,
                                        boolean)
    SET plan_cache_mode = force_generic_plan;
