-- The API's batched intake (ADR 0019): one batch of new agent runs, admitted in
-- one transaction and one call. p_groups: [{"tenant": id, "items": [item, ...]}, ...],
-- tenants in id order (the lock order), each tenant's items in arrival order; an item is
-- {"i": its index in the batch, "run_id", "agent_id", "version" (null: the agent's live
-- version, ADR 0034), "input", "key" (Idempotency-Key or null), "sha" (request digest,
-- hex), "webhook", "priority", "shed" (the cell refuses this run's class now), "event"
-- (RunCreated's data without its version, which is resolved here)}.
--
-- Per item, in the order create_run checks them one by one: an idempotent replay (of a
-- run already made, or of an earlier item of this batch) is answered first; then
-- shedding, a tenant being moved to another cell, the agent version, a run no worker
-- drives, and the tenant's own limits against its load row, locked once for the batch and
-- counted item by item, so max_queued holds exactly. Admitted items are inserted in one
-- statement per tenant with their RunCreated events; an item whose key a concurrent
-- request took meanwhile answers as that request's run. One row per item comes back: (i,
-- outcome, run_id, status, detail); outcome is one of created, existing, conflict,
-- tombstoned, overloaded, moving, agent_not_found, version_not_found, not_runnable,
-- erased, paused, no_policy, quota, budget.
--
-- SECURITY INVOKER: each tenant's statements run with tenantry.tenant_id set to that
-- tenant, so row-level security checks every one of them as it does one request's.

CREATE OR REPLACE FUNCTION tenantry_create_runs(p_groups jsonb)
RETURNS TABLE (i integer, outcome text, run_id uuid, status text, detail jsonb)
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, public AS $$
#variable_conflict use_column
DECLARE
    g jsonb;
    v_tenant text;
    r record;
    f record;
    lim record;
    v_live bigint;
    v_version integer;
    v_model text;
    v_pos integer;
    a_i integer[];
    a_run uuid[];
    a_agent uuid[];
    a_version integer[];
    a_input jsonb[];
    a_key text[];
    a_sha bytea[];
    a_webhook text[];
    a_priority text[];
    a_event jsonb[];
    a_replay text[];  -- an item answered by an earlier item of the batch: its key
    v_made uuid[];
BEGIN
    FOR g IN SELECT value FROM jsonb_array_elements(p_groups) LOOP
        v_tenant := g->>'tenant';
        PERFORM set_config('tenantry.tenant_id', v_tenant, true);
        a_i := '{}'; a_run := '{}'; a_agent := '{}'; a_version := '{}'; a_input := '{}';
        a_key := '{}'; a_sha := '{}'; a_webhook := '{}'; a_priority := '{}'; a_event := '{}';
        a_replay := '{}';
        -- The admission lock of lock_for_admission, taken once for the whole batch.
        SELECT l.queued + l.running + l.waiting AS live, p.max_queued,
               tenantry_month_spend(b) AS month_spend_micros, p.monthly_spend_cap_micros,
               t.erased_at, t.admissions_paused_at,
               EXISTS (SELECT 1 FROM frozen_tenants z WHERE z.tenant_id = l.tenant_id) AS moving
        INTO lim
        FROM tenant_load l JOIN tenant_policies p ON p.tenant_id = l.tenant_id
        JOIN tenant_budget b ON b.tenant_id = l.tenant_id
        JOIN tenants t ON t.tenant_id = l.tenant_id
        WHERE l.tenant_id = v_tenant
        FOR UPDATE OF l;
        v_live := lim.live;

        FOR r IN SELECT x.* FROM jsonb_to_recordset(g->'items') AS x(
                i integer, run_id uuid, agent_id uuid, version integer, input jsonb,
                key text, sha text, webhook text, priority text, shed boolean, event jsonb)
        LOOP
            IF r.key IS NOT NULL THEN
                v_pos := array_position(a_key, r.key);
                IF v_pos IS NOT NULL THEN
                    -- The same key earlier in this batch: answered with that item's run
                    -- (or a conflict, if the bodies differ) once it is inserted, below.
                    a_i := a_i || r.i; a_run := a_run || NULL::uuid;
                    a_agent := a_agent || NULL::uuid; a_version := a_version || NULL::int;
                    a_input := a_input || NULL::jsonb; a_key := a_key || NULL::text;
                    a_sha := a_sha || decode(r.sha, 'hex');
                    a_webhook := a_webhook || NULL::text;
                    a_priority := a_priority || NULL::text; a_event := a_event || NULL::jsonb;
                    a_replay := a_replay || r.key;
                    CONTINUE;
                END IF;
                SELECT k.run_id, k.request_sha256, k.status, k.deleted INTO f FROM (
                    SELECT x.run_id, x.request_sha256, x.status, false AS deleted FROM runs x
                    WHERE x.tenant_id = v_tenant AND x.idempotency_key = r.key
                    UNION ALL
                    SELECT y.run_id, NULL, y.status, true FROM tombstones y
                    WHERE y.tenant_id = v_tenant
                      AND y.idempotency_key_sha256 = sha256(convert_to(r.key, 'UTF8'))
                    LIMIT 1) k;
                IF FOUND THEN
                    i := r.i; run_id := f.run_id; status := f.status; detail := NULL;
                    outcome := CASE WHEN f.deleted THEN 'tombstoned'
                                    WHEN f.request_sha256 <> decode(r.sha, 'hex') THEN 'conflict'
                                    ELSE 'existing' END;
                    RETURN NEXT;
                    CONTINUE;
                END IF;
            END IF;
            i := r.i; run_id := NULL; status := NULL; detail := NULL;
            IF r.shed THEN
                outcome := 'overloaded'; RETURN NEXT; CONTINUE;
            END IF;
            IF lim.moving THEN  -- being moved to another cell: asked again shortly
                outcome := 'moving'; RETURN NEXT; CONTINUE;
            END IF;
            IF r.version IS NULL THEN
                SELECT v.version, v.spec->>'model' INTO v_version, v_model
                FROM agents a JOIN agent_versions v
                  ON v.tenant_id = a.tenant_id AND v.agent_id = a.agent_id
                 AND v.version = a.live_version
                WHERE a.tenant_id = v_tenant AND a.agent_id = r.agent_id;
                IF NOT FOUND THEN
                    outcome := 'agent_not_found'; RETURN NEXT; CONTINUE;
                END IF;
            ELSE
                SELECT v.version, v.spec->>'model' INTO v_version, v_model
                FROM agent_versions v JOIN agents a
                  ON a.tenant_id = v.tenant_id AND a.agent_id = v.agent_id
                WHERE v.tenant_id = v_tenant AND v.agent_id = r.agent_id
                  AND v.version = r.version;
                IF NOT FOUND THEN
                    outcome := 'version_not_found'; RETURN NEXT; CONTINUE;
                END IF;
            END IF;
            IF v_model IN ('activity', 'task') THEN
                outcome := 'not_runnable'; detail := jsonb_build_object('model', v_model);
                RETURN NEXT; CONTINUE;
            END IF;
            IF lim.erased_at IS NOT NULL THEN
                outcome := 'erased'; RETURN NEXT; CONTINUE;
            END IF;
            IF lim.admissions_paused_at IS NOT NULL THEN
                outcome := 'paused';
                detail := jsonb_build_object('paused_at', lim.admissions_paused_at);
                RETURN NEXT; CONTINUE;
            END IF;
            IF lim.max_queued IS NULL THEN  -- no load row at all, as admit() says
                outcome := 'no_policy'; RETURN NEXT; CONTINUE;
            END IF;
            IF v_live >= lim.max_queued THEN
                outcome := 'quota';
                detail := jsonb_build_object('limit_value', lim.max_queued, 'current', v_live);
                RETURN NEXT; CONTINUE;
            END IF;
            IF lim.monthly_spend_cap_micros IS NOT NULL
               AND lim.month_spend_micros >= lim.monthly_spend_cap_micros THEN
                outcome := 'budget';
                detail := jsonb_build_object('limit_value', lim.monthly_spend_cap_micros,
                                             'current', lim.month_spend_micros);
                RETURN NEXT; CONTINUE;
            END IF;
            v_live := v_live + 1;
            a_i := a_i || r.i; a_run := a_run || r.run_id; a_agent := a_agent || r.agent_id;
            a_version := a_version || v_version; a_input := a_input || r.input;
            a_key := a_key || r.key; a_sha := a_sha || decode(r.sha, 'hex');
            a_webhook := a_webhook || r.webhook; a_priority := a_priority || r.priority;
            a_event := a_event || (r.event || jsonb_build_object('version', v_version));
            a_replay := a_replay || NULL::text;
        END LOOP;

        IF cardinality(a_i) = 0 THEN
            CONTINUE;
        END IF;
        -- Slot 1 is taken by RunCreated in the same transaction, hence last_seq = 1.
        WITH made AS (
            INSERT INTO runs AS n (tenant_id, run_id, agent_id, agent_version, input,
                                   idempotency_key, request_sha256, webhook_url, priority,
                                   kind, last_seq)
            SELECT v_tenant, u.run_id, u.agent_id, u.version, u.input, u.key, u.sha,
                   u.webhook, u.priority, 'agent', 1
            FROM unnest(a_run, a_agent, a_version, a_input, a_key, a_sha, a_webhook,
                        a_priority) AS u(run_id, agent_id, version, input, key, sha,
                                         webhook, priority)
            WHERE u.run_id IS NOT NULL
            ON CONFLICT (tenant_id, idempotency_key) DO NOTHING
            RETURNING n.run_id
        )
        SELECT coalesce(array_agg(made.run_id), '{}') INTO v_made FROM made;
        INSERT INTO run_events (tenant_id, run_id, seq, type, data, format)
        SELECT v_tenant, u.run_id, 1, 'RunCreated', u.event, 1
        FROM unnest(a_run, a_event) AS u(run_id, event)
        WHERE u.run_id = ANY (v_made);

        FOR v_pos IN 1 .. cardinality(a_i) LOOP
            i := a_i[v_pos]; detail := NULL;
            IF a_run[v_pos] IS NULL THEN
                -- a replay of an earlier item of this batch (or of the concurrent request
                -- that took its key)
                SELECT k.run_id, k.request_sha256, k.status INTO f FROM runs k
                WHERE k.tenant_id = v_tenant AND k.idempotency_key = a_replay[v_pos];
                run_id := f.run_id; status := f.status;
                outcome := CASE WHEN f.request_sha256 = a_sha[v_pos] THEN 'existing'
                                ELSE 'conflict' END;
            ELSIF a_run[v_pos] = ANY (v_made) THEN
                outcome := 'created'; run_id := a_run[v_pos]; status := 'queued';
            ELSE
                -- a concurrent request with the same key committed first
                SELECT k.run_id, k.request_sha256, k.status INTO f FROM runs k
                WHERE k.tenant_id = v_tenant AND k.idempotency_key = a_key[v_pos];
                run_id := f.run_id; status := f.status;
                outcome := CASE WHEN f.request_sha256 = a_sha[v_pos] THEN 'existing'
                                ELSE 'conflict' END;
            END IF;
            RETURN NEXT;
        END LOOP;
    END LOOP;
END
$$;
REVOKE ALL ON FUNCTION tenantry_create_runs(jsonb) FROM PUBLIC, tenantry_app, tenantry_console;
GRANT EXECUTE ON FUNCTION tenantry_create_runs(jsonb) TO tenantry_app;
