-- Model gateway: provider accounts the gateway routes to, and runs parked on a model.
--
-- Its functions and triggers are routines now, each the source of its latest definition
-- (src/tenantry/db/routines/, ADR 0037): wake_parked.

-- Platform configuration, like the tool-server registry but owned by the operator: a row
-- with tenant_id NULL is a platform account any tenant's runs may use (subject to region);
-- a row with a tenant_id is that tenant's bring-your-own-key account and serves only it.
-- No row-level security: workers route every tenant's calls through these accounts, and no
-- tenant-facing API reads this table. A platform account's API key is sealed with the
-- master key here; a BYOK account names a secret in its tenant's vault instead.
CREATE TABLE model_accounts (
    account_id      text PRIMARY KEY CHECK (account_id ~ '^[a-z0-9][a-z0-9_-]{1,63}$'),
    tenant_id       text REFERENCES tenants (tenant_id),
    provider        text NOT NULL CHECK (provider IN ('openai', 'anthropic', 'scripted')),
    base_url        text NOT NULL CHECK (base_url ~ '^https?://'),
    models          text[] NOT NULL CHECK (cardinality(models) BETWEEN 1 AND 100),
    region          text NOT NULL,
    rpm             integer CHECK (rpm > 0),
    tpm             integer CHECK (tpm > 0),
    -- Lower first: routing prefers the lowest priority with a healthy account, and spreads
    -- runs over equal-priority accounts by a stable hash of the run id.
    priority        integer NOT NULL DEFAULT 0,
    secret_name     text,
    secret_sealed   bytea,
    secret_nonce    bytea,
    master_key_id   text,
    enabled         boolean NOT NULL DEFAULT true,
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now(),
    CHECK (tenant_id IS NOT NULL OR secret_name IS NULL),
    CHECK ((secret_sealed IS NULL) = (secret_nonce IS NULL))
);
CREATE INDEX model_accounts_tenant ON model_accounts (tenant_id) WHERE tenant_id IS NOT NULL;
GRANT SELECT, INSERT, UPDATE ON model_accounts TO tenantry_app;

-- A run parked because no account could serve its model waits (status 'waiting') with the
-- models it can use (its own and its fallbacks); a successful probe of an account serving
-- one of them wakes it, and available_at is the latest it is looked at again even if
-- nobody probes.
ALTER TABLE runs ADD COLUMN parked_on text[];
CREATE INDEX runs_parked_due ON runs (available_at)
    WHERE status = 'waiting' AND parked_on IS NOT NULL;
