-- One retention batch, one transaction, all or nothing (ADR 0017): up to p_limit ended runs
-- of a tenant (p_cutoff: runs that ended before it; p_run: one run only, DELETE
-- /v1/runs/{id}) leave a tombstone each, their blobs are queued for deletion (p_blobs),
-- and their rows go — events, payloads, approvals, reservations, test cases' copies and
-- evaluation verdicts (ADR 0034), the run — with the ended-run totals.
--
-- The caller runs it as a single statement, so its fence is checked by the server at the
-- batch's start and again at its end (clock time): a cleaner paused past its lease writes
-- nothing, and a new holder's take waits on the lease row until a batch in flight has
-- committed.
--
-- tenantry.retention = 'on' is the exemption of the immutability triggers, for this call
-- only: set local at the start and put back before each RETURN; a call that raises leaves
-- it to the rollback (of the transaction, or of the caller's savepoint), which undoes it. Not
-- a SET clause: on PostgreSQL 15 and later a function's SET of a custom parameter needs
-- SET privilege on it when the owner is not a superuser (docs/reference/database-roles.md).
-- plan_cache_mode = force_generic_plan (ADR 0026): the batch
-- names up to 500 runs in an array; planned with the array's values (plpgsql's first
-- custom plans), every statement on the partitioned log prunes its 32 partitions element
-- by element, 20-37 ms of planning per statement where the unpartitioned log took 0.5. A
-- generic plan is planned once per session and scans each partition's index with the
-- array — what a batch of runs spread over all 32 partitions does anyway.

CREATE OR REPLACE FUNCTION tenantry_retention_batch(
    p_tenant text, p_owner text, p_epoch bigint, p_cutoff timestamptz, p_limit integer,
    p_reason text, p_run uuid DEFAULT NULL, p_blobs boolean DEFAULT true)
RETURNS TABLE (runs integer, events bigint, blobs integer)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public
SET plan_cache_mode = force_generic_plan AS $$
DECLARE
    v_runs uuid[];
    v_statuses text[];
    v_events bigint;
    v_blobs integer := 0;
    v_was text := coalesce(current_setting('tenantry.retention', true), '');
BEGIN
    PERFORM set_config('tenantry.retention', 'on', true);
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
        PERFORM set_config('tenantry.retention', v_was, true);
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
            -- Every blob written since the registry (migration 0048) is a row of its run.
            SELECT x.run_id, x.ref FROM public.blobs x
            WHERE x.tenant_id = p_tenant AND x.run_id = ANY (v_runs)
            UNION ALL
            -- Blobs from before it, named by their events. An event over 8 KiB keeps its
            -- fields in run_event_payloads (its row says only {"$payload": n}): read there.
            SELECT e.run_id, r.ref FROM public.run_events e
            LEFT JOIN public.run_event_payloads p
              ON p.tenant_id = e.tenant_id AND p.run_id = e.run_id AND p.seq = e.seq
            CROSS JOIN LATERAL (SELECT coalesce(p.data, e.data) AS data) d
            CROSS JOIN LATERAL (
                SELECT d.data->>'output_ref' AS ref WHERE e.type = 'ToolCompleted'
                UNION ALL
                SELECT d.data->>'ref' WHERE e.type = 'SandboxSaved'
                UNION ALL
                -- What a call stored besides its output (a browser's screenshots).
                SELECT jsonb_array_elements_text(d.data->'blob_refs')
                WHERE e.type = 'ToolCompleted'
                  AND jsonb_typeof(d.data->'blob_refs') = 'array'
            ) r
            WHERE e.tenant_id = p_tenant AND e.run_id = ANY (v_runs)
              AND e.type IN ('ToolCompleted', 'SandboxSaved')
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
    PERFORM set_config('tenantry.retention', v_was, true);
    RETURN QUERY SELECT cardinality(v_runs), v_events, v_blobs;
END
$$;
REVOKE ALL ON FUNCTION tenantry_retention_batch(text, text, bigint, timestamptz, integer, text,
    uuid, boolean) FROM PUBLIC, tenantry_app, tenantry_console;
GRANT EXECUTE ON FUNCTION tenantry_retention_batch(text, text, bigint, timestamptz, integer,
    text, uuid, boolean) TO tenantry_app;
