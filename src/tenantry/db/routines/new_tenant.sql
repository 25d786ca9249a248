-- Every tenant has a policy (defaults until an operator sets one), a load row and a budget
-- row from the moment it exists (fair scheduling and the ledger, ADR 0004).

CREATE OR REPLACE FUNCTION tenantry_new_tenant() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public AS $$
BEGIN
    INSERT INTO public.tenant_policies (tenant_id) VALUES (NEW.tenant_id);
    INSERT INTO public.tenant_load (tenant_id) VALUES (NEW.tenant_id);
    INSERT INTO public.tenant_budget (tenant_id) VALUES (NEW.tenant_id);
    RETURN NULL;
END
$$;

CREATE OR REPLACE TRIGGER tenants_policy AFTER INSERT ON tenants
    FOR EACH ROW EXECUTE FUNCTION tenantry_new_tenant();
