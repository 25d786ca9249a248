-- Wake runs parked on a model (ADR 0009): a successful probe of an account serving one of
-- p_models wakes the runs parked on it; p_models NULL wakes the ones whose recheck time
-- has come. Waking crosses tenants (one provider recovers for everyone), so it is a
-- definer function that can only move parked runs back to the queue. None of a tenant
-- being moved to another cell.

CREATE OR REPLACE FUNCTION tenantry_wake_parked(p_models text[], p_limit integer)
RETURNS integer
LANGUAGE sql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, public AS $$
    WITH due AS (
        SELECT r.tenant_id, r.run_id FROM public.runs r
        WHERE r.status = 'waiting' AND r.parked_on IS NOT NULL
          AND r.tenant_id <> ALL (public.tenantry_frozen_tenants())
          AND (CASE WHEN p_models IS NULL THEN r.available_at <= now()
                    ELSE r.parked_on && p_models OR '*' = ANY (p_models) END)
        LIMIT p_limit
        FOR UPDATE SKIP LOCKED
    ), woken AS (
        UPDATE public.runs r
        SET status = 'queued', parked_on = NULL, available_at = NULL, updated_at = now()
        FROM due WHERE r.tenant_id = due.tenant_id AND r.run_id = due.run_id
        RETURNING 1
    )
    SELECT count(*)::integer FROM woken
$$;
REVOKE ALL ON FUNCTION tenantry_wake_parked(text[], integer)
    FROM PUBLIC, tenantry_app, tenantry_console;
GRANT EXECUTE ON FUNCTION tenantry_wake_parked(text[], integer) TO tenantry_app;
