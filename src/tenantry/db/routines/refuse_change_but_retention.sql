-- Immutable except for the retention functions' deletes (ADR 0017): an UPDATE is always
-- refused; a DELETE only while tenantry_retention_under_way() (the retention batch's and
-- expiry's own SET clause). The event log, tombstones and the audit trail.

CREATE OR REPLACE FUNCTION tenantry_refuse_change_but_retention() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' AND tenantry_retention_under_way() THEN
        RETURN OLD;
    END IF;
    RAISE EXCEPTION '% rows are immutable', TG_TABLE_NAME
        USING ERRCODE = 'restrict_violation';
END
$$;

CREATE OR REPLACE TRIGGER audit_log_append_only BEFORE UPDATE OR DELETE ON audit_log
    FOR EACH ROW EXECUTE FUNCTION tenantry_refuse_change_but_retention();

-- On the partitioned parent, cloned onto every partition (ADR 0026).
CREATE OR REPLACE TRIGGER run_events_immutable BEFORE UPDATE OR DELETE ON run_events
    FOR EACH ROW EXECUTE FUNCTION tenantry_refuse_change_but_retention();

CREATE OR REPLACE TRIGGER tombstones_immutable BEFORE UPDATE OR DELETE ON tombstones
    FOR EACH ROW EXECUTE FUNCTION tenantry_refuse_change_but_retention();

CREATE OR REPLACE TRIGGER account_changes_append_only BEFORE UPDATE OR DELETE
    ON account_changes FOR EACH ROW EXECUTE FUNCTION tenantry_refuse_change_but_retention();
