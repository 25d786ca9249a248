-- The wake on a policy write, in its transaction (ADR 0035): a changed monthly spend cap
-- wakes the tenant's runs waiting for it that it lets go (their status change notifies the
-- workers, tenantry_runnable). More than a batch are left to the workers' recheck, which
-- calls the same tenantry_wake_spend_capped.

CREATE OR REPLACE FUNCTION tenantry_cap_changed() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public AS $$
BEGIN
    PERFORM public.tenantry_wake_spend_capped(NEW.tenant_id, 1000);
    RETURN NULL;
END
$$;
REVOKE ALL ON FUNCTION tenantry_cap_changed() FROM PUBLIC, tenantry_app, tenantry_console;

CREATE OR REPLACE TRIGGER tenant_policies_cap_changed
    AFTER UPDATE OF monthly_spend_cap_micros ON tenant_policies
    FOR EACH ROW
    WHEN (OLD.monthly_spend_cap_micros IS DISTINCT FROM NEW.monthly_spend_cap_micros)
    EXECUTE FUNCTION tenantry_cap_changed();
