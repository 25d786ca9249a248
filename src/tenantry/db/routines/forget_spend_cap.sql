-- A run that leaves 'waiting' by any path other than the spend cap's wake (a cancel, a
-- decision that queues a waiting run) forgets the cap it waited for, and the month's end it
-- was held to unless that path set its own: otherwise a run queued that way would not be
-- claimed until the month ends, and a later wait of another kind would still name the cap.
-- ADR 0035.

CREATE OR REPLACE FUNCTION tenantry_forget_spend_cap() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, public AS $$
BEGIN
    NEW.waiting_cap_micros := NULL;
    IF NEW.available_at IS NOT DISTINCT FROM OLD.available_at THEN
        NEW.available_at := NULL;
    END IF;
    RETURN NEW;
END
$$;

CREATE OR REPLACE TRIGGER runs_forget_spend_cap BEFORE UPDATE OF status ON runs
    FOR EACH ROW
    WHEN (OLD.waiting_cap_micros IS NOT NULL AND NEW.status <> 'waiting')
    EXECUTE FUNCTION tenantry_forget_spend_cap();
