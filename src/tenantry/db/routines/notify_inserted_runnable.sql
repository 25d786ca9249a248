-- The workers' wake-up for new runs (tenantry_notify_runnable's, per INSERT statement): one
-- notification per statement that queued runs. Postgres folds identical notifications of a
-- transaction anyway; this skips the calls (ADR 0019).

CREATE OR REPLACE FUNCTION tenantry_notify_inserted_runnable() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM inserted WHERE status = 'queued') THEN
        PERFORM pg_notify('tenantry_runnable', '');
    END IF;
    RETURN NULL;
END
$$;

CREATE OR REPLACE TRIGGER runs_notify_runnable_inserted AFTER INSERT ON runs
    REFERENCING NEW TABLE AS inserted
    FOR EACH STATEMENT EXECUTE FUNCTION tenantry_notify_inserted_runnable();
