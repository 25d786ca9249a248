-- Runs in flight that went back to the queue (an approval decided, an activity or a child
-- run returned, a hold ended) while their tenant's spend had reached its cap (ADR 0035):
-- the fair claim passes them over (tenantry_may_claim) until the cap or the month changes,
-- so they wait for the cap as a run refused at its reservation does, and their logs say so
-- (RunParked, written with the status change). At most p_limit; returns how many. Runs
-- that never started stay queued as before (admission refuses new ones meanwhile), and so
-- does a run with a cancel pending (a worker ends it once it may be claimed). The spend is
-- read once per tenant, for the few tenants with such runs in the queue. Called by the
-- workers' housekeeping.

CREATE OR REPLACE FUNCTION tenantry_hold_spend_capped(p_limit integer) RETURNS integer
LANGUAGE sql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, public AS $$
    WITH queued AS MATERIALIZED (
        SELECT DISTINCT r.tenant_id FROM public.runs r
        WHERE r.status = 'queued' AND r.steps > 0 AND r.kind = 'agent'
    ), over AS MATERIALIZED (
        SELECT q.tenant_id, p.monthly_spend_cap_micros AS cap,
               public.tenantry_month_spend(b) AS spent
        FROM queued q
        JOIN public.tenant_policies p ON p.tenant_id = q.tenant_id
        JOIN public.tenant_budget b ON b.tenant_id = q.tenant_id
        WHERE p.monthly_spend_cap_micros IS NOT NULL
          AND q.tenant_id <> ALL (public.tenantry_frozen_tenants())
    ), held AS (
        SELECT r.tenant_id, r.run_id, o.cap, o.spent FROM public.runs r
        JOIN over o ON o.tenant_id = r.tenant_id
        WHERE o.spent >= o.cap AND r.status = 'queued' AND r.steps > 0
          AND r.kind = 'agent' AND NOT r.cancel_requested
        ORDER BY r.tenant_id, r.run_id
        LIMIT p_limit
        FOR UPDATE OF r SKIP LOCKED
    ), parked AS (
        -- The event's slot from the run's counter, as every append takes one.
        UPDATE public.runs r
        SET status = 'waiting', waiting_cap_micros = h.cap,
            available_at = date_trunc('month', now()) + interval '1 month',
            last_seq = r.last_seq + 1, updated_at = now()
        FROM held h WHERE r.tenant_id = h.tenant_id AND r.run_id = h.run_id
        RETURNING r.tenant_id, r.run_id, r.last_seq, r.available_at, h.cap, h.spent
    ), logged AS (
        -- RunParked as the worker writes it (runs/waiting.py), less the decision's basis.
        INSERT INTO public.run_events (tenant_id, run_id, seq, type, data, format)
        SELECT k.tenant_id, k.run_id, k.last_seq, 'RunParked',
               jsonb_build_object(
                   'reason', 'monthly_spend_cap',
                   'until', to_char(k.available_at AT TIME ZONE 'UTC',
                                    'YYYY-MM-DD"T"HH24:MI:SS"+00:00"'),
                   'spent_micros', k.spent, 'cap_micros', k.cap), 1
        FROM parked k
        RETURNING 1
    )
    SELECT count(*)::integer FROM logged
$$;
REVOKE ALL ON FUNCTION tenantry_hold_spend_capped(integer)
    FROM PUBLIC, tenantry_app, tenantry_console;
GRANT EXECUTE ON FUNCTION tenantry_hold_spend_capped(integer) TO tenantry_app;
