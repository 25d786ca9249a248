-- Provider capacity shared by every worker of a cell (issue 19, ADR 0021): each gateway
-- (one per worker process) that serves an account with an rpm/tpm holds a leased share of
-- it here, renewed every few seconds, never per model call. A share is a fraction of the
-- account; the sum over an account's live rows never exceeds 1 (a holder raises its own
-- only up to what the others leave, under the account's advisory lock). A row whose lease
-- ran out is ignored by the others at once and deleted at their next renewal: a crashed
-- worker's capacity goes back to the living within one lease.
--
-- Platform data like model_accounts (no tenant column, no RLS); no foreign key: accounts
-- from configuration (TENANTRY_MODEL_BASE_URL) are not rows, and rows expire on their own.
-- `demand` is what the holder wants, in requests (or, for a tpm-only account, tokens) per
-- minute: {"in_flight": later steps of runs in flight, "tenants": {tenant: first steps}}
-- — how the shares are divided (models/shares.py). Tenants' ids only: never content.
CREATE TABLE model_capacity_shares (
    account_id  text NOT NULL,
    holder      text NOT NULL CHECK (length(holder) BETWEEN 1 AND 100),
    demand      jsonb NOT NULL,
    share       double precision NOT NULL CHECK (share >= 0 AND share <= 1),
    renewed_at  timestamptz NOT NULL DEFAULT clock_timestamp(),
    expires_at  timestamptz NOT NULL,
    PRIMARY KEY (account_id, holder)
);
GRANT SELECT, INSERT, UPDATE, DELETE ON model_capacity_shares TO tenantry_app;
