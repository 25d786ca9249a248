-- A deleted run leaves the live counts (tenant_load) as its status change would have: a
-- dead letter is a waiting task until it is deleted (retention, ADR 0017).

CREATE OR REPLACE FUNCTION tenantry_uncount_deleted_run() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public AS $$
BEGIN
    UPDATE public.tenant_load SET
        queued  = queued  - (OLD.status = 'queued')::int,
        running = running - (OLD.status = 'running')::int,
        waiting = waiting - (OLD.status = 'waiting')::int
    WHERE tenant_id = OLD.tenant_id AND OLD.status IN ('queued', 'running', 'waiting');
    RETURN NULL;
END
$$;

-- (WHEN: an ended run, all that retention deletes, costs no call at all.)
CREATE OR REPLACE TRIGGER runs_uncount_deleted AFTER DELETE ON runs
    FOR EACH ROW WHEN (OLD.status IN ('queued', 'running', 'waiting'))
    EXECUTE FUNCTION tenantry_uncount_deleted_run();
