-- A run in flight that reaches its tenant's monthly spend cap waits instead of ending
-- (issue 36 item 2, ADR 0035): status 'waiting', slot released, nothing of it lost, until
-- the operator raises or removes the cap or the month it was refused in ends. Expand only:
-- one nullable column, an index, two triggers and new functions; nothing the previous
-- release calls changes.
--
-- Its functions and triggers are routines now, each the source of its latest definition
-- (src/tenantry/db/routines/, ADR 0037): wake_spend_capped, hold_spend_capped, cap_changed,
-- forget_spend_cap, console_spend_capped.

-- 1. The cap a waiting run found reached (NULL: it does not wait for the cap). Its
--    available_at holds when the month it was refused in ends (the period's roll-over).
ALTER TABLE runs ADD COLUMN waiting_cap_micros bigint;
-- NOT VALID: checked on every row written from now on, without scanning the table now
-- (every row there is NULL anyway).
ALTER TABLE runs ADD CONSTRAINT runs_waiting_cap_micros_check
    CHECK (waiting_cap_micros >= 0) NOT VALID;
-- Small: only the runs waiting for their cap (the workers' recheck reads it every pass).
CREATE INDEX runs_waiting_for_spend_cap ON runs (available_at)
    WHERE status = 'waiting' AND waiting_cap_micros IS NOT NULL;
