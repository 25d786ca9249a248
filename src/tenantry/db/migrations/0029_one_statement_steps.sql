-- One statement per step (issue 19): a step's writes used to be a transaction of 6–9
-- statements (BEGIN, the tenant setting, one append per event, the run's projections and
-- lease, the audit row, the reservation's settlement, the usage fact, COMMIT) and the pool's
-- reset on release: each a round trip, ~11 per step. Each function below is one call in an
-- implicit transaction; it sets the tenant itself (transaction-local, so nothing is left on
-- the connection) and runs as the caller, so row-level security checks every row as before.

-- Save a step: its events in the next slots of the run's log, the run's projections and
-- lease renewed, and what the step's transaction held before — the tool call's audit row,
-- the model reply's reservation settled with its usage fact, the terminal status. Under the
-- writer's epoch: a stale owner gets NULL and writes nothing. p_payloads[i] is the full
-- data of an event too big for its log row (p_data[i] then holds the stand-in), else NULL.
-- p_terminal: {status, answer, error} of a terminal event (the run need not be 'running').
-- Returns the last slot written and whether a cancel was requested meanwhile.
CREATE FUNCTION tenantry_commit_step(
    p_tenant text, p_run uuid, p_epoch bigint,
    p_types text[], p_data jsonb[], p_formats smallint[], p_payloads jsonb[],
    p_steps integer, p_input_tokens bigint, p_output_tokens bigint, p_cost bigint,
    p_lease_seconds double precision,
    p_audit jsonb, p_settle jsonb, p_usage jsonb, p_terminal jsonb,
    OUT last_seq integer, OUT cancel_requested boolean)
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, public AS $$
DECLARE
    v_count integer := cardinality(p_types);
    v_first integer;
BEGIN
    PERFORM set_config('tenantry.tenant_id', p_tenant, true);
    -- The counter row hands out the slots under its row lock (never max(seq)+1); the same
    -- update renews the lease and adds the step to the run's totals.
    UPDATE public.runs r SET
        last_seq = r.last_seq + v_count,
        steps = r.steps + p_steps,
        input_tokens = r.input_tokens + p_input_tokens,
        output_tokens = r.output_tokens + p_output_tokens,
        cost_micros = r.cost_micros + p_cost,
        lease_expires_at = CASE WHEN p_terminal IS NULL
                                THEN now() + make_interval(secs => p_lease_seconds)
                                ELSE r.lease_expires_at END,
        updated_at = now()
    WHERE r.tenant_id = p_tenant AND r.run_id = p_run AND r.lease_epoch = p_epoch
      AND (p_terminal IS NOT NULL OR r.status = 'running')
    RETURNING r.last_seq, r.cancel_requested INTO last_seq, cancel_requested;
    IF NOT FOUND THEN
        RETURN;  -- not ours any more: nothing written
    END IF;
    v_first := last_seq - v_count + 1;

    INSERT INTO public.run_events (tenant_id, run_id, seq, type, data, format)
    SELECT p_tenant, p_run, v_first + e.i - 1, e.type, e.data, e.format
    FROM unnest(p_types, p_data, p_formats) WITH ORDINALITY AS e(type, data, format, i);
    IF p_payloads IS NOT NULL THEN
        INSERT INTO public.run_event_payloads (tenant_id, run_id, seq, data)
        SELECT p_tenant, p_run, v_first + e.i - 1, e.data
        FROM unnest(p_payloads) WITH ORDINALITY AS e(data, i)
        WHERE e.data IS NOT NULL;
    END IF;

    IF p_audit IS NOT NULL THEN
        INSERT INTO public.audit_log (tenant_id, audit_id, run_id, tool, server, key,
                                      arguments_sha256, outcome, detail, duration_ms)
        VALUES (p_tenant, (p_audit->>'audit_id')::uuid, p_run, p_audit->>'tool',
                p_audit->>'server', p_audit->>'key',
                decode(p_audit->>'arguments_sha256', 'hex'), p_audit->>'outcome',
                p_audit->>'detail', (p_audit->>'duration_ms')::double precision);
    END IF;

    IF p_settle IS NOT NULL THEN
        -- The reservation is settled, and the billing fact written, with the reply that
        -- consumed it: both commit or neither does.
        IF NOT public.tenantry_close_reservation(
                p_tenant, p_run, p_epoch, (p_settle->>'reservation_id')::uuid, 'settled',
                (p_settle->>'tokens')::bigint, (p_settle->>'cost_micros')::bigint) THEN
            RAISE EXCEPTION 'the budget reservation is no longer this owner''s to settle'
                USING ERRCODE = 'TR010';
        END IF;
    END IF;
    IF p_usage IS NOT NULL THEN
        INSERT INTO public.usage_facts (tenant_id, run_id, seq, agent_id, agent_version,
                                        provider, account, model, input_tokens,
                                        cached_input_tokens, cache_write_input_tokens,
                                        output_tokens, cost_micros, price_version)
        VALUES (p_tenant, p_run, last_seq, (p_usage->>'agent_id')::uuid,
                (p_usage->>'agent_version')::integer, p_usage->>'provider',
                p_usage->>'account', p_usage->>'model',
                (p_usage->>'input_tokens')::bigint, (p_usage->>'cached_input_tokens')::bigint,
                (p_usage->>'cache_write_input_tokens')::bigint,
                (p_usage->>'output_tokens')::bigint, (p_usage->>'cost_micros')::bigint,
                p_usage->>'price_version');
    END IF;

    IF p_terminal IS NOT NULL THEN
        -- A run with a webhook gets its delivery queued in the same transaction (outbox).
        UPDATE public.runs r SET
            -- JSON null is what the caller's None became: stored as NULL, as before.
            status = p_terminal->>'status',
            answer = nullif(p_terminal->'answer', 'null'::jsonb),
            error = nullif(p_terminal->'error', 'null'::jsonb),
            finished_at = now(), updated_at = now(),
            lease_owner = NULL, lease_expires_at = NULL,
            webhook_state = CASE WHEN r.webhook_url IS NULL THEN NULL ELSE 'pending' END,
            webhook_next_at = CASE WHEN r.webhook_url IS NULL THEN NULL ELSE now() END
        WHERE r.tenant_id = p_tenant AND r.run_id = p_run;
    END IF;
END
$$;
REVOKE ALL ON FUNCTION tenantry_commit_step(text, uuid, bigint, text[], jsonb[], smallint[],
    jsonb[], integer, bigint, bigint, bigint, double precision, jsonb, jsonb, jsonb, jsonb)
    FROM PUBLIC;
GRANT EXECUTE ON FUNCTION tenantry_commit_step(text, uuid, bigint, text[], jsonb[],
    smallint[], jsonb[], integer, bigint, bigint, bigint, double precision, jsonb, jsonb,
    jsonb, jsonb) TO tenantry_app;

-- Reserve before a model call in one call: tenantry_reserve (0007) with the tenant set.
CREATE FUNCTION tenantry_reserve_step(p_tenant text, p_run uuid, p_epoch bigint,
                                      p_reservation uuid, p_tokens bigint, p_cost bigint,
                                      OUT outcome text, OUT wait_seconds double precision,
                                      OUT spent bigint, OUT cap bigint)
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, public AS $$
BEGIN
    PERFORM set_config('tenantry.tenant_id', p_tenant, true);
    SELECT r.outcome, r.wait_seconds, r.spent, r.cap INTO outcome, wait_seconds, spent, cap
    FROM public.tenantry_reserve(p_tenant, p_run, p_epoch, p_reservation, p_tokens,
                                 p_cost) r;
END
$$;
REVOKE ALL ON FUNCTION tenantry_reserve_step(text, uuid, bigint, uuid, bigint, bigint)
    FROM PUBLIC;
GRANT EXECUTE ON FUNCTION tenantry_reserve_step(text, uuid, bigint, uuid, bigint, bigint)
    TO tenantry_app;

-- A run's events after a slot, in one call (the worker loading or catching up on a run, the
-- API serving its event stream): the tenant set by the function, RLS as the caller.
CREATE FUNCTION tenantry_run_events(p_tenant text, p_run uuid, p_after integer,
                                    p_limit integer)
RETURNS TABLE (seq integer, type text, data jsonb, created_at timestamptz, format smallint)
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, public AS $$
BEGIN
    PERFORM set_config('tenantry.tenant_id', p_tenant, true);
    RETURN QUERY
    SELECT e.seq, e.type, coalesce(p.data, e.data), e.created_at, e.format
    FROM public.run_events e
    LEFT JOIN public.run_event_payloads p
      ON p.tenant_id = e.tenant_id AND p.run_id = e.run_id AND p.seq = e.seq
    WHERE e.tenant_id = p_tenant AND e.run_id = p_run AND e.seq > p_after
    ORDER BY e.seq
    LIMIT p_limit;
END
$$;
REVOKE ALL ON FUNCTION tenantry_run_events(text, uuid, integer, integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION tenantry_run_events(text, uuid, integer, integer) TO tenantry_app;

-- What a worker needs of a run it just claimed, in one call: the run row (NULL epoch when
-- it is not there), its tenant's region and plan, and its pinned agent version.
CREATE FUNCTION tenantry_run_for_worker(p_tenant text, p_run uuid)
RETURNS TABLE (agent_id uuid, agent_version integer, input jsonb, status text,
               lease_epoch bigint, region text, plan text, created_at timestamptz,
               started_at timestamptz, spec jsonb, tool_pins jsonb)
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, public AS $$
BEGIN
    PERFORM set_config('tenantry.tenant_id', p_tenant, true);
    RETURN QUERY
    SELECT r.agent_id, r.agent_version, r.input, r.status, r.lease_epoch, t.region, t.plan,
           r.created_at, r.started_at, v.spec, v.tool_pins
    FROM public.runs r
    JOIN public.tenants t ON t.tenant_id = r.tenant_id
    JOIN public.agent_versions v ON v.tenant_id = r.tenant_id AND v.agent_id = r.agent_id
                                AND v.version = r.agent_version
    WHERE r.tenant_id = p_tenant AND r.run_id = p_run;
END
$$;
REVOKE ALL ON FUNCTION tenantry_run_for_worker(text, uuid) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION tenantry_run_for_worker(text, uuid) TO tenantry_app;
