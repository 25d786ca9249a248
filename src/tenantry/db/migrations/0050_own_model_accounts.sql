-- Tenants register their own model accounts (issue 41, POST /v1/model-accounts).
-- Expand only: two columns the previous release neither reads nor writes; its inserts get
-- the default (`operator`: as before, the operator registered it) and NULL.

-- A tenant-facing API reads and writes model_accounts now (/v1/model-accounts). The table
-- still has no row-level security (workers route every tenant's calls over all of it):
-- every tenant route's statement names the tenant (models/queries.sql, own_accounts.py),
-- and another tenant's row answers as a missing one.

-- Who registered the account: the gateway holds an account a tenant registered itself to
-- the operator's address rules at every connection (tools/destinations.py), as it does a
-- tenant's own tool server; an operator's registration is the operator's decision.
ALTER TABLE model_accounts ADD COLUMN registered_by text NOT NULL DEFAULT 'operator'
    CHECK (registered_by IN ('operator', 'tenant'));
-- (A small table: its rows are checked now.)
ALTER TABLE model_accounts ADD CONSTRAINT model_accounts_tenant_registers_its_own
    CHECK (registered_by = 'operator' OR tenant_id IS NOT NULL);

-- Whose account served the call (models/types.py): `tenant`, the tenant's own key (bring
-- your own key), or `platform`. NULL: a fact written before this column (or by the previous
-- release during an upgrade); the usage reports then look its account up
-- (ledger/queries.sql, routines/usage_per_tenant_v2.sql).
ALTER TABLE usage_facts ADD COLUMN account_owner text;
-- NOT VALID: checked on every fact written from now on, without scanning the billing
-- record (one row per model call ever) under this migration's lock; every row there is
-- NULL anyway.
ALTER TABLE usage_facts ADD CONSTRAINT usage_facts_account_owner_check
    CHECK (account_owner IN ('platform', 'tenant')) NOT VALID;
