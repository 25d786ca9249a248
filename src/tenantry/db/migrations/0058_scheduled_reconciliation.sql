-- Scheduled billing reconciliation (docs/how-to/billing.md#scheduled-reconciliation): one
-- job per cell, under a fenced lease, reconciles each reporting operator account's previous
-- UTC day with the provider's report, keeps per account and day where that stands (so a
-- restart neither skips nor repeats a day), and queues one notification to the operator's
-- webhook per flagged or late day. Expand only: new tables, and a nullable column and an
-- index on billing_reconciliations that the previous release never reads (its inserts leave
-- the column NULL, which the index ignores). Operator data: no tenant, no row security, as
-- billing_reconciliations.

-- The job's lease: one row per cell, taken when free or expired, its epoch bumped on every
-- take and checked (row locked) in every transaction that records under it.
CREATE TABLE billing_reconcile_lease (
    job         text PRIMARY KEY CHECK (job = 'billing_reconcile'),
    owner       text CHECK (length(owner) <= 100),
    epoch       bigint NOT NULL DEFAULT 0,
    expires_at  timestamptz
);

-- Per operator account and UTC day: pending (the provider's report not there yet: retried at
-- next_attempt_at), done (reconciled: its reconciliation and largest difference), or late
-- (no report by the deadline).
CREATE TABLE billing_reconcile_days (
    account             text NOT NULL CHECK (length(account) BETWEEN 1 AND 64),
    day                 date NOT NULL,
    status              text NOT NULL CHECK (status IN ('pending', 'done', 'late')),
    attempts            integer NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    next_attempt_at     timestamptz,
    last_error          text CHECK (length(last_error) <= 500),
    reconciliation_id   uuid REFERENCES billing_reconciliations (reconciliation_id),
    difference_ratio    double precision CHECK (difference_ratio >= 0),
    flagged             boolean NOT NULL DEFAULT false,
    updated_at          timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (account, day)
);

-- The operator's webhook outbox: one row per (account, day, kind), queued in the transaction
-- that records the day, so neither a crash nor a second job instance sends it twice.
CREATE TABLE operator_notifications (
    account          text NOT NULL CHECK (length(account) BETWEEN 1 AND 64),
    day              date NOT NULL,
    kind             text NOT NULL CHECK (kind IN ('billing.reconciliation.flagged',
                                                   'billing.reconciliation.late')),
    body             jsonb NOT NULL,
    attempts         integer NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    next_attempt_at  timestamptz,  -- NULL: delivered, or given up
    delivered_at     timestamptz,
    last_error       text CHECK (length(last_error) <= 500),
    created_at       timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (account, day, kind)
);
CREATE INDEX operator_notifications_due ON operator_notifications (next_attempt_at)
    WHERE next_attempt_at IS NOT NULL;

-- A scheduled reconciliation covers one day of one account, and is stored once: the insert
-- is ON CONFLICT DO NOTHING on this index.
ALTER TABLE billing_reconciliations ADD COLUMN scheduled_day date;
CREATE UNIQUE INDEX billing_reconciliations_scheduled
    ON billing_reconciliations (account, scheduled_day) WHERE scheduled_day IS NOT NULL;

GRANT SELECT, INSERT, UPDATE ON billing_reconcile_lease, billing_reconcile_days,
    operator_notifications TO tenantry_app;
