-- Close a budget reservation under the run's current epoch: 'settled' with the actual usage
-- (p_tokens, p_cost), or 'released' (0, 0: nothing was spent). False if the reservation is
-- not this owner's to close. Only the reservation's own row is touched (ADR 0024): it
-- records what was spent and stays `unfolded`; the tenant's budget row takes it at the
-- next fold (tenantry_fold_closings). Runs as the caller (RLS).

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
