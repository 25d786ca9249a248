-- Fold a tenant's closed reservations into its budget row (ADR 0024), under the row's lock
-- (taken here; the caller's transaction keeps it to its commit). Returns the row as it now
-- is, the month rolled over (what the reservation checks against; written only with a
-- fold). The closings folded are exactly those this statement marks: one that commits
-- meanwhile waits for the next fold, never counted twice or lost. Runs as the caller.
--
-- Settlements used to take the tenant's budget row lock with every model step; now the
-- row takes the closings in later, all at once, under the lock somebody holds anyway: the
-- next reservation (tenantry_reserve), a run's end (tenantry_commit_step), the housekeeping
-- sweep (tenantry_sweep_reservations) for tenants gone quiet.

CREATE OR REPLACE FUNCTION tenantry_fold_closings(p_tenant text) RETURNS tenant_budget
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
