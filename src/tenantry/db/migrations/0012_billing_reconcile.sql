-- Billing reconciliation (docs/decisions/0007-billing-reconcile.md): our usage facts per
-- provider account and UTC day, compared with the provider's own usage export.
--
-- Its functions and triggers are routines now, each the source of its latest definition
-- (src/tenantry/db/routines/, ADR 0037): usage_per_account_day, refuse_change.

-- The provider bills an account (an organization's key) across all our tenants, so the
-- comparison reads every tenant's facts of one account: by account and time.
CREATE INDEX usage_facts_by_account ON usage_facts (account, created_at);

-- Operator data (no tenant): each reconciliation run, with its per-day rows, so the console
-- can show the last ones per account. Append-only: a past check is evidence.
CREATE TABLE billing_reconciliations (
    reconciliation_id   uuid PRIMARY KEY,
    account             text NOT NULL,
    provider            text NOT NULL,
    from_day            date NOT NULL,
    to_day              date NOT NULL CHECK (to_day >= from_day),
    source              text NOT NULL CHECK (source IN ('export', 'fetch')),
    cost_compared       boolean NOT NULL,
    flagged_days        integer NOT NULL CHECK (flagged_days >= 0),
    days                jsonb NOT NULL,
    created_at          timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX billing_reconciliations_by_account
    ON billing_reconciliations (account, created_at DESC);
GRANT SELECT, INSERT ON billing_reconciliations TO tenantry_app;
