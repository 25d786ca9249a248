-- tenantry_commit_step (commit_step.sql, kept for the previous release) and one statement
-- more on a run's end only (ADR 0045): the deliveries to the tenant's webhook endpoints
-- whose filters take the run are queued with its terminal event, as the run's own webhook
-- is on its row. A step that does not end its run runs exactly what it did before.
--
-- Save a step in one call (ADR 0023): its events in the next slots of the run's
-- log, the run's projections and lease renewed, and what the step's transaction holds
-- besides — the tool call's audit row, the model reply's reservation settled with its usage
-- fact, the terminal status. One call in an implicit transaction where a step used to be
-- 6–9 statements; it sets the tenant itself (transaction-local) and runs as the caller, so
-- row-level security checks every row.
--
-- Under the writer's epoch: a stale owner gets NULL and writes nothing. p_payloads[i] is
-- the full data of an event too big for its log row (p_data[i] then holds the stand-in),
-- else NULL. p_terminal: {status, answer, error} of a terminal event (the run need not be
-- 'running'); a run's end also folds its tenant's closed reservations into the budget row
-- (ADR 0024). Returns the last slot written, whether a cancel was requested meanwhile, and
-- hand_back: the tenant is being moved to another cell (ADR 0029), so the run went back to
-- the queue between two steps. The usage fact's account_owner (migration 0050): whose
-- account served the call.

CREATE OR REPLACE FUNCTION tenantry_commit_step_v2(
    p_tenant text, p_run uuid, p_epoch bigint,
    p_types text[], p_data jsonb[], p_formats smallint[], p_payloads jsonb[],
    p_steps integer, p_input_tokens bigint, p_output_tokens bigint, p_cost bigint,
    p_lease_seconds double precision,
    p_audit jsonb, p_settle jsonb, p_usage jsonb, p_terminal jsonb,
    OUT last_seq integer, OUT cancel_requested boolean, OUT hand_back boolean)
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, public AS $$
DECLARE
    v_count integer := cardinality(p_types);
    v_first integer;
    v_agent uuid;
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
    RETURNING r.last_seq, r.cancel_requested, r.agent_id
        INTO last_seq, cancel_requested, v_agent;
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
                                        output_tokens, cost_micros, price_version,
                                        account_owner)
        VALUES (p_tenant, p_run, last_seq, (p_usage->>'agent_id')::uuid,
                (p_usage->>'agent_version')::integer, p_usage->>'provider',
                p_usage->>'account', p_usage->>'model',
                (p_usage->>'input_tokens')::bigint, (p_usage->>'cached_input_tokens')::bigint,
                (p_usage->>'cache_write_input_tokens')::bigint,
                (p_usage->>'output_tokens')::bigint, (p_usage->>'cost_micros')::bigint,
                p_usage->>'price_version', p_usage->>'account_owner');
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
        -- The tenant's endpoints (at most 10, found by an index on tenant_id): nothing
        -- to insert and one index probe for a tenant without any. A delivery already queued
        -- (a terminal commit made again under the same epoch) stays as it is: never an
        -- error that would fail the run's end.
        INSERT INTO public.endpoint_deliveries (tenant_id, run_id, endpoint_id, next_at)
        SELECT p_tenant, p_run, w.endpoint_id, now() FROM public.webhook_endpoints w
        WHERE w.tenant_id = p_tenant
          AND (w.statuses IS NULL OR p_terminal->>'status' = ANY (w.statuses))
          AND (w.agent_ids IS NULL OR v_agent = ANY (w.agent_ids))
        ON CONFLICT DO NOTHING;
        -- The one change from 0029: a run's end folds its tenant's closed reservations
        -- into the budget row (the run's own settlements all committed before this), so
        -- when a tenant's runs have ended its row is exact again. Last, so the row lock is
        -- held only to the commit; no lock at all when nothing waits to be folded.
        PERFORM 1 FROM public.budget_reservations b
        WHERE b.tenant_id = p_tenant AND b.unfolded LIMIT 1;
        IF FOUND THEN
            PERFORM public.tenantry_fold_closings(p_tenant);
        END IF;
    ELSIF EXISTS (SELECT 1 FROM public.frozen_tenants f WHERE f.tenant_id = p_tenant) THEN
        -- The tenant is being moved: the run goes back to the queue between two steps
        -- (its log complete up to here), under a new epoch so nothing more of this
        -- owner's lands; the move copies it once no run of the tenant holds a lease.
        UPDATE public.runs r SET status = 'queued', lease_owner = NULL,
            lease_expires_at = NULL, lease_epoch = r.lease_epoch + 1, updated_at = now()
        WHERE r.tenant_id = p_tenant AND r.run_id = p_run;
        hand_back := true;
        RETURN;
    END IF;
    hand_back := false;
END
$$;
REVOKE ALL ON FUNCTION tenantry_commit_step_v2(text, uuid, bigint, text[], jsonb[], smallint[],
    jsonb[], integer, bigint, bigint, bigint, double precision, jsonb, jsonb, jsonb, jsonb)
    FROM PUBLIC, tenantry_app, tenantry_console;
GRANT EXECUTE ON FUNCTION tenantry_commit_step_v2(text, uuid, bigint, text[], jsonb[], smallint[],
    jsonb[], integer, bigint, bigint, bigint, double precision, jsonb, jsonb, jsonb, jsonb)
    TO tenantry_app;
