-- Second walls (docs/decisions/0011-database-roles.md): the processes log in as roles that
-- own nothing, the console's cross-tenant reads need a role the tenant API cannot assume,
-- and model accounts' routing columns cannot be rewritten by the application role.
--
-- Its functions and triggers are routines now, each the source of its latest definition
-- (src/tenantry/db/routines/, ADR 0037): console_runs, console_pending_approvals,
-- console_tenants, queue_depth.

-- Roles are cluster-wide and several databases may be migrated at once (each under its own
-- advisory lock), so a role another migration just made is not an error.
DO $$
BEGIN
    -- The console's role: alone may call the cross-tenant console functions.
    BEGIN
        CREATE ROLE tenantry_console NOLOGIN NOBYPASSRLS;
    EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL;
    END;
    -- The API's and workers' login: no privileges of its own, NOINHERIT, so it holds
    -- tenantry_app's only after the pool's startup `role` switch; SET ROLE NONE leaves nothing.
    -- No password: it logs in where pg_hba trusts it (the embedded cluster's private
    -- socket) or once the operator gives it one (docs/reference/database-roles.md).
    BEGIN
        CREATE ROLE tenantry_login LOGIN NOINHERIT NOSUPERUSER NOCREATEDB NOCREATEROLE
            NOBYPASSRLS;
    EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL;
    END;
    -- The console pool's login: may become tenantry_console, and nothing else; the tenant
    -- API's login is not a member of tenantry_console, so no statement it runs reaches it.
    BEGIN
        CREATE ROLE tenantry_console_login LOGIN NOINHERIT NOSUPERUSER NOCREATEDB
            NOCREATEROLE NOBYPASSRLS;
    EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL;
    END;
END
$$;
GRANT tenantry_app TO tenantry_login;
GRANT tenantry_console TO tenantry_console_login;
-- `api` and `worker` refuse to serve a schema behind the code: the login reads which
-- migrations were applied before it switches to any role (migrate.py's table).
GRANT SELECT ON schema_migrations TO tenantry_login;

GRANT USAGE ON SCHEMA public TO tenantry_console;

-- Model accounts: the application only disables an account (models/queries.sql); where an
-- account sends its key (base_url, provider) and the sealed key itself change only through
-- the owner (registration inserts; rotation runs as the migrating role).
REVOKE UPDATE ON model_accounts FROM tenantry_app;
GRANT UPDATE (enabled, updated_at) ON model_accounts TO tenantry_app;

-- A platform key is now sealed with its account id, provider and base_url in the AES-GCM
-- associated data (vault/crypto.py). Keys sealed before this migration (1: bound to
-- the account id only) are opened the old way until re-sealed with the master key, which
-- `tenantry migrate` and `up` do right after migrating (vault/store.py).
ALTER TABLE model_accounts ADD COLUMN secret_binding smallint NOT NULL DEFAULT 2
    CHECK (secret_binding IN (1, 2));
UPDATE model_accounts SET secret_binding = 1 WHERE secret_sealed IS NOT NULL;
