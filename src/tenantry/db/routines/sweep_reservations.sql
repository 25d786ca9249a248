-- The housekeeping sweep of the budget ledger (ADR 0004, 0024). Reservations whose owner
-- lost the run (epoch moved on, or the run left 'running') are forfeited: the estimate
-- leaves the month's reservations (nothing was billed — usage facts are the bill), the
-- tokens stay spent (the call may have happened). Then the closings of tenants that took
-- no reservation since (a tenant whose runs are parked, say) are folded: their rows that
-- nobody holds (SKIP LOCKED: a reservation holding one folds it anyway). Returns the
-- forfeits only — the housekeeping loop reads its result as "more to do at once", and
-- closings arrive all the time under load. A tenant being moved to another cell is left
-- as it is.

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
          AND b.tenant_id <> ALL (public.tenantry_frozen_tenants())
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
          AND b.tenant_id <> ALL (public.tenantry_frozen_tenants())
        LIMIT p_limit
        FOR UPDATE OF b SKIP LOCKED
    LOOP
        PERFORM public.tenantry_fold_closings(v_tenant);
    END LOOP;
    RETURN v_forfeited;
END
$$;
REVOKE ALL ON FUNCTION tenantry_sweep_reservations(integer)
    FROM PUBLIC, tenantry_app, tenantry_console;
GRANT EXECUTE ON FUNCTION tenantry_sweep_reservations(integer) TO tenantry_app;
