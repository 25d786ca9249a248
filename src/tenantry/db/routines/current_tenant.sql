-- The tenant this transaction acts for, or NULL when none was set (then row-level security
-- shows nothing): every table's tenant_isolation policy calls it.
--
-- Early: the policies need it when a migration creates them, so it is applied before
-- pending migrations. It reads no table, so it needs none of them. Its grant to
-- tenantry_app stays in migration 0001, which makes that role after this function exists.
-- phase: early

CREATE OR REPLACE FUNCTION tenantry_current_tenant() RETURNS text
LANGUAGE sql STABLE AS $$
    SELECT NULLIF(current_setting('tenantry.tenant_id', true), '')
$$;
