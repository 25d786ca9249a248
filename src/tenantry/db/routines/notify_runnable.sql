-- Workers wake on this instead of polling for new work: a run's status changing to
-- 'queued'. Inserted runs notify per statement (tenantry_notify_inserted_runnable).

CREATE OR REPLACE FUNCTION tenantry_notify_runnable() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.status = 'queued' THEN
        PERFORM pg_notify('tenantry_runnable', '');
    END IF;
    RETURN NULL;
END
$$;

CREATE OR REPLACE TRIGGER runs_notify_runnable AFTER UPDATE OF status ON runs
    FOR EACH ROW EXECUTE FUNCTION tenantry_notify_runnable();
