-- Runs by status for /metrics: live statuses are counted in tenant_load
-- (tenantry_count_runs); ended runs are counted here, in run_status_totals, kept in the
-- same transaction as each run's terminal status change, so a scrape reads a few rows
-- instead of counting the runs table.
--
-- A deleted ended run leaves the totals too — except in a retention batch, which takes its
-- runs off them in one statement per status (tenantry_retention_batch), not one UPDATE of
-- the same hot row per run: 500 row versions, and a lock on the row the tenant's finishing
-- runs need, held for the whole batch.
-- requires: retention_under_way

CREATE OR REPLACE FUNCTION tenantry_count_ended_runs() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        IF OLD.status IN ('finished', 'failed', 'cancelled') THEN
            UPDATE public.run_status_totals SET runs = runs - 1
            WHERE tenant_id = OLD.tenant_id AND status = OLD.status;
        END IF;
        RETURN NULL;
    END IF;
    IF NEW.status IN ('finished', 'failed', 'cancelled')
       AND OLD.status IS DISTINCT FROM NEW.status THEN
        INSERT INTO public.run_status_totals AS t (tenant_id, status, runs)
        VALUES (NEW.tenant_id, NEW.status, 1)
        ON CONFLICT (tenant_id, status) DO UPDATE SET runs = t.runs + 1;
    END IF;
    RETURN NULL;
END
$$;

CREATE OR REPLACE TRIGGER runs_count_ended AFTER UPDATE OF status ON runs
    FOR EACH ROW EXECUTE FUNCTION tenantry_count_ended_runs();

CREATE OR REPLACE TRIGGER runs_count_ended_deleted AFTER DELETE ON runs
    FOR EACH ROW WHEN (OLD.status IN ('finished', 'failed', 'cancelled')
                       AND NOT tenantry_retention_under_way())
    EXECUTE FUNCTION tenantry_count_ended_runs();
