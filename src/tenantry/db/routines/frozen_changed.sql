-- Moving a tenant (ADR 0029): a freeze clears every API process's key cache (the next
-- request reads the tenant's state: 503 while it moves); an unfreeze wakes the workers
-- (its runs are claimable).

CREATE OR REPLACE FUNCTION tenantry_frozen_changed() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, public AS $$
BEGIN
    PERFORM pg_notify('tenantry_keys', '');
    IF TG_OP = 'DELETE' THEN
        PERFORM pg_notify('tenantry_runnable', '');
    END IF;
    RETURN NULL;
END
$$;

CREATE OR REPLACE TRIGGER frozen_tenants_changed
    AFTER INSERT OR UPDATE OR DELETE ON frozen_tenants
    FOR EACH STATEMENT EXECUTE FUNCTION tenantry_frozen_changed();
