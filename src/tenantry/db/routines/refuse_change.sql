-- Immutable rows (invariant 7: an agent version, once written, never changes; likewise the
-- billing facts, prices and reconciliations). The privilege is withheld from the
-- application role and this trigger stops everyone else (including the table owner).

CREATE OR REPLACE FUNCTION tenantry_refuse_change() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION '% rows are immutable', TG_TABLE_NAME
        USING ERRCODE = 'restrict_violation';
END
$$;

CREATE OR REPLACE TRIGGER agent_versions_immutable
    BEFORE UPDATE OR DELETE ON agent_versions
    FOR EACH ROW EXECUTE FUNCTION tenantry_refuse_change();

CREATE OR REPLACE TRIGGER billing_reconciliations_immutable
    BEFORE UPDATE OR DELETE ON billing_reconciliations
    FOR EACH ROW EXECUTE FUNCTION tenantry_refuse_change();

CREATE OR REPLACE TRIGGER model_prices_immutable
    BEFORE UPDATE OR DELETE ON model_prices
    FOR EACH ROW EXECUTE FUNCTION tenantry_refuse_change();

CREATE OR REPLACE TRIGGER sandbox_usage_facts_immutable
    BEFORE UPDATE OR DELETE ON sandbox_usage_facts
    FOR EACH ROW EXECUTE FUNCTION tenantry_refuse_change();

CREATE OR REPLACE TRIGGER usage_facts_immutable
    BEFORE UPDATE OR DELETE ON usage_facts
    FOR EACH ROW EXECUTE FUNCTION tenantry_refuse_change();
