-- What a tenant holds now (tenant_load: queued, running, waiting) follows every status
-- change of every run, in its transaction, so admission and the fair claim read one row
-- instead of counting runs. Inserts are counted per statement (tenantry_count_inserted_runs);
-- a deleted run by tenantry_uncount_deleted_run.

CREATE OR REPLACE FUNCTION tenantry_count_runs() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public AS $$
DECLARE
    old_status text := CASE WHEN TG_OP = 'UPDATE' THEN OLD.status END;
BEGIN
    IF old_status IS NOT DISTINCT FROM NEW.status THEN
        RETURN NULL;
    END IF;
    UPDATE public.tenant_load SET
        queued  = queued  + (NEW.status = 'queued')::int
                          - (old_status IS NOT DISTINCT FROM 'queued')::int,
        running = running + (NEW.status = 'running')::int
                          - (old_status IS NOT DISTINCT FROM 'running')::int,
        waiting = waiting + (NEW.status = 'waiting')::int
                          - (old_status IS NOT DISTINCT FROM 'waiting')::int
    WHERE tenant_id = NEW.tenant_id;
    RETURN NULL;
END
$$;

CREATE OR REPLACE TRIGGER runs_count AFTER UPDATE OF status ON runs
    FOR EACH ROW EXECUTE FUNCTION tenantry_count_runs();
