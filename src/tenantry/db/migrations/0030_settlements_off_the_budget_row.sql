-- Settlements off the tenant's budget row (issue 19, ADR 0024). Every model step of a
-- tenant took that tenant's tenant_budget row lock twice: its reservation (which must:
-- the cap and the bucket are checked against every other reservation of the tenant) and
-- its settlement in tenantry_commit_step (which need not). pg_stat_statements put the
-- tail of a step there: with 20 runs of one tenant at once, the reservation's FOR UPDATE
-- averaged 13.8 ms of waiting, and the settling UPDATE as much again.
--
-- Now closing a reservation (settled to the provider's figures, or released) touches only
-- the reservation's own row: it records what was spent and stays `unfolded`. The tenant's
-- row takes the closings in later, all at once, under the lock somebody holds anyway:
--   * the next reservation (it holds the lock to check the cap and the bucket),
--   * a run's end (tenantry_commit_step with a terminal event),
--   * the housekeeping sweep (tenantry_sweep_reservations), for tenants gone quiet.
-- Until then a closed reservation still counts at its estimate in `reserved_micros` and
-- its unused tokens are not yet back in the bucket (conservative). Readers that show or
-- decide on the month's spend see it exact: tenantry_month_spend and tenantry_budget_now
-- count the closings not yet folded.
--
-- A tenant with neither a token bucket nor a spend cap (the default policy) has nothing a
-- reservation must be checked against, so its reservations take no lock at all: they are
-- written `counted = false` (their estimate is not in the row's `reserved_micros`), and
-- the fold adds what they cost when they close. Readers add the open ones' estimates. A cap
-- or bucket set while such calls are in flight sees them once they settle.
--
-- Its functions and triggers are routines now, each the source of its latest definition
-- (src/tenantry/db/routines/, ADR 0037): budget_with, budget_now, month_spend,
-- fold_closings, reserve, close_reservation, sweep_reservations, commit_step,
-- console_tenants.

ALTER TABLE budget_reservations
    ADD COLUMN spent_tokens bigint CHECK (spent_tokens >= 0),
    ADD COLUMN spent_micros bigint CHECK (spent_micros >= 0),
    ADD COLUMN unfolded boolean NOT NULL DEFAULT false,
    ADD COLUMN counted boolean NOT NULL DEFAULT true,
    ADD CONSTRAINT budget_reservations_unfolded_is_closed
        CHECK (NOT unfolded OR (status IN ('settled', 'released')
                                AND spent_tokens IS NOT NULL AND spent_micros IS NOT NULL));
-- What the budget row does not know yet: closings to fold, and open uncounted estimates.
CREATE INDEX budget_reservations_unfolded ON budget_reservations (tenant_id)
    WHERE unfolded OR (status = 'reserved' AND NOT counted);
