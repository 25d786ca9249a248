-- A provider snapshot's owners follow their snapshot id (ADR 0034): a promotion makes the
-- accepted snapshot the one that was the change, reported by the change's owners (any other
-- id: by none known), and a cleared change has none. In a trigger rather than in each
-- statement: the previous release's promote, which knows nothing of owners, is kept to the
-- rule too.

CREATE OR REPLACE FUNCTION tenantry_snapshot_owners_follow() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.accepted IS DISTINCT FROM OLD.accepted THEN
        NEW.accepted_on := CASE WHEN NEW.accepted = OLD.changed_to THEN OLD.changed_on
                                ELSE '{}' END;
    END IF;
    IF NEW.changed_to IS NULL THEN
        NEW.changed_on := '{}';
    END IF;
    RETURN NEW;
END
$$;

CREATE OR REPLACE TRIGGER agent_model_snapshots_owners_follow
    BEFORE UPDATE ON agent_model_snapshots
    FOR EACH ROW EXECUTE FUNCTION tenantry_snapshot_owners_follow();
