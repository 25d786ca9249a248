-- Reserve before a model call in one call (ADR 0023): tenantry_reserve with the tenant set
-- (transaction-local), as the caller.

CREATE OR REPLACE FUNCTION tenantry_reserve_step(
    p_tenant text, p_run uuid, p_epoch bigint, p_reservation uuid, p_tokens bigint,
    p_cost bigint, OUT outcome text, OUT wait_seconds double precision, OUT spent bigint,
    OUT cap bigint)
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, public AS $$
BEGIN
    PERFORM set_config('tenantry.tenant_id', p_tenant, true);
    SELECT r.outcome, r.wait_seconds, r.spent, r.cap INTO outcome, wait_seconds, spent, cap
    FROM public.tenantry_reserve(p_tenant, p_run, p_epoch, p_reservation, p_tokens,
                                 p_cost) r;
END
$$;
REVOKE ALL ON FUNCTION tenantry_reserve_step(text, uuid, bigint, uuid, bigint, bigint)
    FROM PUBLIC, tenantry_app, tenantry_console;
GRANT EXECUTE ON FUNCTION tenantry_reserve_step(text, uuid, bigint, uuid, bigint, bigint)
    TO tenantry_app;
