-- Reserve before a model call (the budget ledger, ADR 0004). 'ok' with the reservation;
-- 'wait' with the seconds until the tenant's bucket holds enough tokens; 'over_cap' when
-- the month's spend would pass the cap; 'lease_lost' when the caller no longer holds the
-- run. Runs as the caller (RLS).
--
-- The tenant's budget row is read through the fold (tenantry_fold_closings, which takes
-- its lock), so what it says is exact; a tenant with neither a token bucket nor a spend
-- cap has nothing to check against, so its reservation takes no lock at all: it is
-- written `counted = false` (its estimate is not in the row's reserved_micros) and the
-- fold adds what it cost when it closes (ADR 0024).

CREATE OR REPLACE FUNCTION tenantry_reserve(
    p_tenant text, p_run uuid, p_epoch bigint, p_reservation uuid, p_tokens bigint,
    p_cost bigint, OUT outcome text, OUT wait_seconds double precision, OUT spent bigint,
    OUT cap bigint)
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
