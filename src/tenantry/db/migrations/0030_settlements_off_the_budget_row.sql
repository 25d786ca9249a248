-- Settlements off the tenant's budget row (issue 19, ADR 0024). Every model step of a
-- tenant took that tenant's tenant_budget row lock twice: its reservation (which must:
-- the cap and the bucket are checked against every other reservation of the tenant) and
-- its settlement in tenantry_commit_step (which need not). pg_stat_statements put the
-- tail of a step there: with 20 runs of one tenant at once, the reservation's FOR UPDATE
-- averaged 13.8 ms of waiting, and the settling UPDATE as much again.
--
-- Now closing a reservation (settled to the provider's figures, or released) touches only
-- the reservation's own row: it records what was spent and stays `unfolded`. The tenant's
-- row takes the closings in later, all at once, under the lock somebody holds anyway:
--   * the next reservation (it holds the lock to check the cap and the bucket),
--   * a run's end (tenantry_commit_step with a terminal event, below),
--   * the housekeeping sweep (tenantry_sweep_reservations, below), for tenants gone quiet.
-- Until then a closed reservation still counts at its estimate in `reserved_micros` and
-- its unused tokens are not yet back in the bucket (conservative). Readers that show or
-- decide on the month's spend see it exact: tenantry_month_spend and tenantry_budget_now
-- count the closings not yet folded.
--
-- A tenant with neither a token bucket nor a spend cap (the default policy) has nothing a
-- reservation must be checked against, so its reservations take no lock at all: they are
-- written `counted = false` (their estimate is not in the row's `reserved_micros`), and
-- the fold adds what they cost when they close. Readers add the open ones' estimates. A cap
-- or bucket set while such calls are in flight sees them once they settle.

ALTER TABLE budget_reservations
    ADD COLUMN spent_tokens bigint CHECK (spent_tokens >= 0),
    ADD COLUMN spent_micros bigint CHECK (spent_micros >= 0),
    ADD COLUMN unfolded boolean NOT NULL DEFAULT false,
    ADD COLUMN counted boolean NOT NULL DEFAULT true,
    ADD CONSTRAINT budget_reservations_unfolded_is_closed
        CHECK (NOT unfolded OR (status IN ('settled', 'released')
                                AND spent_tokens IS NOT NULL AND spent_micros IS NOT NULL));
-- What the budget row does not know yet: closings to fold, and open uncounted estimates.
CREATE INDEX budget_reservations_unfolded ON budget_reservations (tenant_id)
    WHERE unfolded OR (status = 'reserved' AND NOT counted);

-- A budget row with closings applied: their estimates leave the reservations, what they
-- cost this month joins the month's spend (a new month starts at zero), the tokens they
-- did not use go back into the bucket (or more come out, when a reply used more).
CREATE FUNCTION tenantry_budget_with(b tenant_budget, p_estimates bigint, p_month_costs bigint,
                                     p_tokens_back bigint)
RETURNS tenant_budget
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, public AS $$
BEGIN
    IF b.spend_month < date_trunc('month', now())::date THEN
        b.spent_micros := 0;
        b.spend_month := date_trunc('month', now())::date;
    END IF;
    b.spent_micros := b.spent_micros + p_month_costs;
    b.reserved_micros := greatest(b.reserved_micros - p_estimates, 0);
    IF b.bucket_tokens IS NOT NULL THEN
        b.bucket_tokens := b.bucket_tokens + p_tokens_back;
    END IF;
    RETURN b;
END
$$;

-- What a tenant's budget row says once its closings are folded, without folding them, and
-- with its open uncounted reservations among the reserved: for readers (the policy API's
-- load, the console, admission's and the claim's cap checks). RLS: a tenant's own rows.
CREATE FUNCTION tenantry_budget_now(b tenant_budget) RETURNS tenant_budget
LANGUAGE sql STABLE SET search_path = pg_catalog, public AS $$
    SELECT public.tenantry_budget_with(
        b,
        (coalesce(sum(r.cost_micros) FILTER (WHERE r.unfolded AND r.counted), 0)
         - coalesce(sum(r.cost_micros) FILTER (
               WHERE r.status = 'reserved' AND NOT r.counted), 0))::bigint,
        coalesce(sum(r.spent_micros) FILTER (
            WHERE r.unfolded AND r.closed_at >= date_trunc('month', now())), 0)::bigint,
        coalesce(sum(CASE WHEN r.counted THEN r.tokens ELSE 0 END - r.spent_tokens)
                 FILTER (WHERE r.unfolded), 0)::bigint)
    FROM public.budget_reservations r
    WHERE r.tenant_id = b.tenant_id
      AND (r.unfolded OR (r.status = 'reserved' AND NOT r.counted))
$$;

-- This month's spend including reservations, closings not yet folded counted at what they
-- cost (0007's, which read the row alone). Admission and the fair claim decide on it.
CREATE OR REPLACE FUNCTION tenantry_month_spend(b tenant_budget) RETURNS bigint
LANGUAGE sql STABLE SET search_path = pg_catalog, public AS $$
    SELECT CASE WHEN n.spend_month < date_trunc('month', now())::date THEN n.reserved_micros
                ELSE n.spent_micros + n.reserved_micros END
    FROM public.tenantry_budget_now(b) n
$$;

-- Fold a tenant's closings into its budget row, under the row's lock (taken here; the
-- caller's transaction keeps it to its commit). Returns the row as it now is, the month
-- rolled over (what the reservation checks against; written only with a fold). The closings
-- folded are exactly those this statement marks: one that commits meanwhile waits for the
-- next fold, never counted twice or lost. Runs as the caller.
CREATE FUNCTION tenantry_fold_closings(p_tenant text) RETURNS tenant_budget
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, public AS $$
DECLARE
    l public.tenant_budget;
    v_folded bigint;
    v_estimates bigint;
    v_costs bigint;
    v_back bigint;
BEGIN
    SELECT * INTO l FROM public.tenant_budget WHERE tenant_id = p_tenant FOR UPDATE;
    WITH folded AS (
        UPDATE public.budget_reservations r SET unfolded = false
        WHERE r.tenant_id = p_tenant AND r.unfolded
        RETURNING r.tokens, r.cost_micros, r.spent_tokens, r.spent_micros, r.closed_at,
                  r.counted
    )
    -- An uncounted reservation's estimate was never in the row, nor its tokens out of it.
    SELECT count(*), coalesce(sum(f.cost_micros) FILTER (WHERE f.counted), 0),
           coalesce(sum(f.spent_micros) FILTER (
               WHERE f.closed_at >= date_trunc('month', now())), 0),
           coalesce(sum(CASE WHEN f.counted THEN f.tokens ELSE 0 END - f.spent_tokens), 0)
    INTO v_folded, v_estimates, v_costs, v_back
    FROM folded f;
    l := public.tenantry_budget_with(l, v_estimates, v_costs, v_back);
    IF v_folded > 0 THEN
        UPDATE public.tenant_budget b SET
            bucket_tokens = l.bucket_tokens, spend_month = l.spend_month,
            spent_micros = l.spent_micros, reserved_micros = l.reserved_micros
        WHERE b.tenant_id = p_tenant;
    END IF;
    RETURN l;
END
$$;

-- 0007's reservation, reading the tenant's row through the fold (which takes its lock);
-- without a lock when the tenant has no bucket and no cap to check.
CREATE OR REPLACE FUNCTION tenantry_reserve(p_tenant text, p_run uuid, p_epoch bigint,
                                            p_reservation uuid, p_tokens bigint,
                                            p_cost bigint,
                                            OUT outcome text, OUT wait_seconds double precision,
                                            OUT spent bigint, OUT cap bigint)
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, public AS $$
DECLARE
    l public.tenant_budget;
    p public.tenant_policies;
    v_level double precision;
    v_need double precision;
BEGIN
    PERFORM 1 FROM public.runs r
    WHERE r.tenant_id = p_tenant AND r.run_id = p_run AND r.lease_epoch = p_epoch
      AND r.status = 'running';
    IF NOT FOUND THEN
        outcome := 'lease_lost';
        RETURN;
    END IF;
    SELECT * INTO p FROM public.tenant_policies WHERE tenant_id = p_tenant;
    IF p.monthly_spend_cap_micros IS NULL AND p.tokens_per_minute IS NULL THEN
        INSERT INTO public.budget_reservations
            (tenant_id, reservation_id, run_id, lease_epoch, tokens, cost_micros, counted)
        VALUES (p_tenant, p_reservation, p_run, p_epoch, p_tokens, p_cost, false);
        outcome := 'ok';
        RETURN;
    END IF;
    -- Folded, with the month rolled over: what it says is exact (closings that commit
    -- after this point count at their estimate, as they did before they closed).
    l := public.tenantry_fold_closings(p_tenant);
    spent := l.spent_micros + l.reserved_micros;
    cap := p.monthly_spend_cap_micros;
    IF cap IS NOT NULL AND spent + p_cost > cap THEN
        outcome := 'over_cap';
        RETURN;
    END IF;
    v_level := public.tenantry_bucket_level(l, p);
    IF v_level IS NOT NULL THEN
        -- A call larger than a minute's worth waits for a full bucket, then goes.
        v_need := least(p_tokens::float8, p.tokens_per_minute::float8);
        IF v_level < v_need THEN
            outcome := 'wait';
            wait_seconds := (v_need - v_level) * 60.0 / p.tokens_per_minute;
            RETURN;
        END IF;
    END IF;
    UPDATE public.tenant_budget SET
        bucket_tokens = CASE WHEN v_level IS NULL THEN NULL ELSE v_level - p_tokens END,
        bucket_at = now(), spend_month = l.spend_month, spent_micros = l.spent_micros,
        reserved_micros = l.reserved_micros + p_cost
    WHERE tenant_id = p_tenant;
    INSERT INTO public.budget_reservations
        (tenant_id, reservation_id, run_id, lease_epoch, tokens, cost_micros)
    VALUES (p_tenant, p_reservation, p_run, p_epoch, p_tokens, p_cost);
    outcome := 'ok';
END
$$;

-- Close a reservation under the run's current epoch, as 0007's did, but on its own row:
-- 'settled' with the actual usage, or 'released' (0, 0: nothing was spent). The budget
-- row takes it at the next fold. False if the reservation is not this owner's to close.
CREATE OR REPLACE FUNCTION tenantry_close_reservation(p_tenant text, p_run uuid,
                                                      p_epoch bigint, p_reservation uuid,
                                                      p_status text, p_tokens bigint,
                                                      p_cost bigint)
RETURNS boolean
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, public AS $$
BEGIN
    UPDATE public.budget_reservations b SET
        status = p_status, closed_at = now(), spent_tokens = p_tokens, spent_micros = p_cost,
        unfolded = true
    FROM public.runs r
    WHERE b.tenant_id = p_tenant AND b.reservation_id = p_reservation AND b.run_id = p_run
      AND b.status = 'reserved' AND b.lease_epoch = p_epoch
      AND r.tenant_id = b.tenant_id AND r.run_id = b.run_id AND r.lease_epoch = p_epoch
      AND r.status = 'running';
    RETURN FOUND;
END
$$;

-- The sweeper (0007's forfeits), now also folding the closings of tenants that took no
-- reservation since (a tenant whose runs are parked, say): their rows that nobody holds
-- (SKIP LOCKED: a reservation holding one folds it anyway). Returns the forfeits only —
-- the housekeeping loop reads its result as "more to do at once", and closings arrive
-- all the time under load.
CREATE OR REPLACE FUNCTION tenantry_sweep_reservations(p_limit integer) RETURNS integer
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, public AS $$
DECLARE
    v_forfeited integer;
    v_tenant text;
BEGIN
    WITH stale AS (
        SELECT b.tenant_id, b.reservation_id, b.cost_micros
        FROM public.budget_reservations b
        JOIN public.runs r ON r.tenant_id = b.tenant_id AND r.run_id = b.run_id
        WHERE b.status = 'reserved'
          AND (r.lease_epoch <> b.lease_epoch OR r.status <> 'running')
        LIMIT p_limit
        FOR UPDATE OF b SKIP LOCKED
    ), closed AS (
        UPDATE public.budget_reservations b SET status = 'forfeited', closed_at = now()
        FROM stale WHERE b.tenant_id = stale.tenant_id
                     AND b.reservation_id = stale.reservation_id
        RETURNING b.tenant_id, b.cost_micros, b.counted
    ), per_tenant AS (
        SELECT tenant_id, sum(cost_micros) AS cost FROM closed WHERE counted
        GROUP BY tenant_id
    ), released AS (
        UPDATE public.tenant_budget l
        SET reserved_micros = greatest(l.reserved_micros - per_tenant.cost, 0)
        FROM per_tenant WHERE l.tenant_id = per_tenant.tenant_id
        RETURNING 1
    )
    SELECT count(*)::integer INTO v_forfeited FROM closed;

    FOR v_tenant IN
        SELECT b.tenant_id FROM public.tenant_budget b
        WHERE b.tenant_id IN (SELECT r.tenant_id FROM public.budget_reservations r
                              WHERE r.unfolded)
        LIMIT p_limit
        FOR UPDATE OF b SKIP LOCKED
    LOOP
        PERFORM public.tenantry_fold_closings(v_tenant);
    END LOOP;
    RETURN v_forfeited;
END
$$;

-- The step's commit: 0029's, with its run's end folding the tenant's closings.
CREATE OR REPLACE FUNCTION tenantry_commit_step(
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
        -- The one change from 0029: a run's end folds its tenant's closed reservations
        -- into the budget row (the run's own settlements all committed before this), so
        -- when a tenant's runs have ended its row is exact again. Last, so the row lock is
        -- held only to the commit; no lock at all when nothing waits to be folded.
        PERFORM 1 FROM public.budget_reservations b
        WHERE b.tenant_id = p_tenant AND b.unfolded LIMIT 1;
        IF FOUND THEN
            PERFORM public.tenantry_fold_closings(p_tenant);
        END IF;
    END IF;
END
$$;

-- The console's tenants page: 0009's, its reservations and bucket as they are once folded.
CREATE OR REPLACE FUNCTION tenantry_console_tenants(p_after text, p_limit integer)
RETURNS TABLE (tenant_id text, name text, plan text, region text,
               approval_ttl_seconds integer, weight integer, max_running integer,
               max_queued integer, tokens_per_minute bigint,
               monthly_spend_cap_micros bigint, policy_updated_at timestamptz,
               queued integer, running integer, waiting integer,
               month_spend_micros bigint, reserved_micros bigint,
               bucket_tokens double precision, pending_approvals bigint)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public AS $$
    SELECT t.tenant_id, t.name, t.plan, t.region, t.approval_ttl_seconds, p.weight,
           p.max_running, p.max_queued, p.tokens_per_minute, p.monthly_spend_cap_micros,
           p.updated_at, l.queued, l.running, l.waiting, public.tenantry_month_spend(b),
           (public.tenantry_budget_now(b)).reserved_micros,
           public.tenantry_bucket_level(public.tenantry_budget_now(b), p),
           (SELECT count(*) FROM public.approvals a
            WHERE a.tenant_id = t.tenant_id AND a.status = 'pending')
    FROM public.tenants t
    JOIN public.tenant_policies p ON p.tenant_id = t.tenant_id
    JOIN public.tenant_load l ON l.tenant_id = t.tenant_id
    JOIN public.tenant_budget b ON b.tenant_id = t.tenant_id
    WHERE p_after IS NULL OR t.tenant_id > p_after
    ORDER BY t.tenant_id
    LIMIT least(greatest(p_limit, 1), 200)
$$;
