-- A run in flight that reaches its tenant's monthly spend cap waits instead of ending
-- (issue 36 item 2, ADR 0035): status 'waiting', slot released, nothing of it lost, until
-- the operator raises or removes the cap or the month it was refused in ends. Expand only:
-- one nullable column, an index, two triggers and new functions; nothing the previous
-- release calls changes.

-- 1. The cap a waiting run found reached (NULL: it does not wait for the cap). Its
--    available_at holds when the month it was refused in ends (the period's roll-over).
ALTER TABLE runs ADD COLUMN waiting_cap_micros bigint;
-- NOT VALID: checked on every row written from now on, without scanning the table now
-- (every row there is NULL anyway).
ALTER TABLE runs ADD CONSTRAINT runs_waiting_cap_micros_check
    CHECK (waiting_cap_micros >= 0) NOT VALID;
-- Small: only the runs waiting for their cap (the recheck below reads it every pass).
CREATE INDEX runs_waiting_for_spend_cap ON runs (available_at)
    WHERE status = 'waiting' AND waiting_cap_micros IS NOT NULL;

-- 2. Wake runs waiting for their tenant's monthly spend cap that may go on now, at most
--    p_limit (of p_tenant only, or of every tenant with NULL); returns how many went back to
--    the queue. A run may go on when
--      * the month it was refused in has ended (available_at), or
--      * its tenant's cap is gone, or is higher than the one it found reached and above the
--        month's spend (the fair claim's own test: a claim would pass it).
--    Nothing else wakes it: a run woken in vain parks again with the cap and month it then
--    finds, so no run is woken twice for one change (no loop on an unchanged cap, however
--    close the month's spend is to it). The month's spend is read once per tenant.
CREATE FUNCTION tenantry_wake_spend_capped(p_tenant text, p_limit integer) RETURNS integer
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
REVOKE ALL ON FUNCTION tenantry_wake_spend_capped(text, integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION tenantry_wake_spend_capped(text, integer) TO tenantry_app;

-- 3. Runs in flight that went back to the queue (an approval decided, an activity or a
--    child run returned, a hold ended) while their tenant's spend had reached its cap: the
--    fair claim passes them over (tenantry_may_claim) until the cap or the month changes,
--    so they wait for the cap as a run refused at its reservation does, and their logs say
--    so (RunParked, written with the status change). At most p_limit; returns how many.
--    Runs that never started stay queued as before (admission refuses new ones meanwhile),
--    and so does a run with a cancel pending (a worker ends it once it may be claimed).
--    The spend is read once per tenant, for the few tenants with such runs in the queue.
CREATE FUNCTION tenantry_hold_spend_capped(p_limit integer) RETURNS integer
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
REVOKE ALL ON FUNCTION tenantry_hold_spend_capped(integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION tenantry_hold_spend_capped(integer) TO tenantry_app;

-- 4. The wake on the policy write, in its transaction: a changed cap wakes the tenant's
--    runs it lets go (the status change notifies the workers, tenantry_runnable). More than
--    a batch are left to the workers' recheck, which calls the same function.
CREATE FUNCTION tenantry_cap_changed() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public AS $$
BEGIN
    PERFORM public.tenantry_wake_spend_capped(NEW.tenant_id, 1000);
    RETURN NULL;
END
$$;
REVOKE ALL ON FUNCTION tenantry_cap_changed() FROM PUBLIC;
CREATE TRIGGER tenant_policies_cap_changed
    AFTER UPDATE OF monthly_spend_cap_micros ON tenant_policies
    FOR EACH ROW
    WHEN (OLD.monthly_spend_cap_micros IS DISTINCT FROM NEW.monthly_spend_cap_micros)
    EXECUTE FUNCTION tenantry_cap_changed();

-- 5. A run that leaves 'waiting' by any other path (a cancel, a decision that queues a
--    waiting run) forgets the cap it waited for, and the month's end it was held to unless
--    that path set its own: otherwise a run queued that way would not be claimed until the
--    month ends, and a later wait of another kind would still name the cap.
CREATE FUNCTION tenantry_forget_spend_cap() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, public AS $$
BEGIN
    NEW.waiting_cap_micros := NULL;
    IF NEW.available_at IS NOT DISTINCT FROM OLD.available_at THEN
        NEW.available_at := NULL;
    END IF;
    RETURN NEW;
END
$$;
CREATE TRIGGER runs_forget_spend_cap BEFORE UPDATE OF status ON runs
    FOR EACH ROW
    WHEN (OLD.waiting_cap_micros IS NOT NULL AND NEW.status <> 'waiting')
    EXECUTE FUNCTION tenantry_forget_spend_cap();

-- 6. The operator console's tenants page shows, beside each listed tenant's waiting runs,
--    how many wait for its spend cap: a read across tenants, so (like
--    tenantry_console_flagged_versions) a function of the console role's alone.
CREATE FUNCTION tenantry_console_spend_capped(p_tenants text[])
RETURNS TABLE (tenant_id text, runs bigint)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public AS $$
    SELECT r.tenant_id, count(*) FROM public.runs r
    WHERE r.tenant_id = ANY (p_tenants) AND r.status = 'waiting'
      AND r.waiting_cap_micros IS NOT NULL
    GROUP BY r.tenant_id
$$;
REVOKE ALL ON FUNCTION tenantry_console_spend_capped(text[]) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION tenantry_console_spend_capped(text[]) TO tenantry_console;
