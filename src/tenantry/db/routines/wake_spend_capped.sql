-- Wake runs waiting for their tenant's monthly spend cap that may go on now (ADR 0035), at
-- most p_limit (of p_tenant only, or of every tenant with NULL); returns how many went back
-- to the queue. A run may go on when
--   * the month it was refused in has ended (available_at), or
--   * its tenant's cap is gone, or is higher than the one it found reached and above the
--     month's spend (the fair claim's own test: a claim would pass it).
-- Nothing else wakes it: a run woken in vain parks again with the cap and month it then
-- finds, so no run is woken twice for one change (no loop on an unchanged cap, however
-- close the month's spend is to it). The month's spend is read once per tenant. Called by
-- the policy write's trigger (tenantry_cap_changed) and the workers' recheck.

CREATE OR REPLACE FUNCTION tenantry_wake_spend_capped(
    p_tenant text, p_limit integer) RETURNS integer
LANGUAGE sql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, public AS $$
    WITH capped AS MATERIALIZED (
        SELECT DISTINCT r.tenant_id FROM public.runs r
        WHERE r.status = 'waiting' AND r.waiting_cap_micros IS NOT NULL
          AND (p_tenant IS NULL OR r.tenant_id = p_tenant)
    ), room AS MATERIALIZED (
        SELECT c.tenant_id, p.monthly_spend_cap_micros AS cap,
               (p.monthly_spend_cap_micros IS NULL
                OR public.tenantry_month_spend(b) < p.monthly_spend_cap_micros) AS under
        FROM capped c
        JOIN public.tenant_policies p ON p.tenant_id = c.tenant_id
        JOIN public.tenant_budget b ON b.tenant_id = c.tenant_id
        WHERE c.tenant_id <> ALL (public.tenantry_frozen_tenants())
    ), due AS (
        SELECT r.tenant_id, r.run_id FROM public.runs r
        JOIN room m ON m.tenant_id = r.tenant_id
        WHERE r.status = 'waiting' AND r.waiting_cap_micros IS NOT NULL
          AND (r.available_at <= now()
               OR (m.under AND (m.cap IS NULL OR m.cap > r.waiting_cap_micros)))
        ORDER BY r.available_at, r.run_id
        LIMIT p_limit
        FOR UPDATE OF r SKIP LOCKED
    ), woken AS (
        UPDATE public.runs r
        SET status = 'queued', waiting_cap_micros = NULL, available_at = NULL,
            updated_at = now()
        FROM due WHERE r.tenant_id = due.tenant_id AND r.run_id = due.run_id
        RETURNING 1
    )
    SELECT count(*)::integer FROM woken
$$;
REVOKE ALL ON FUNCTION tenantry_wake_spend_capped(text, integer)
    FROM PUBLIC, tenantry_app, tenantry_console;
GRANT EXECUTE ON FUNCTION tenantry_wake_spend_capped(text, integer) TO tenantry_app;
