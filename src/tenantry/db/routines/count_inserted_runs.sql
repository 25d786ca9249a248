-- Inserted runs are counted per statement (ADR 0019, the batched intake): one tenant_load
-- update per tenant per INSERT statement, however many rows it inserts. Status changes stay
-- counted per row (tenantry_count_runs). Transition tables are not allowed with a column
-- list, hence a trigger of its own.

CREATE OR REPLACE FUNCTION tenantry_count_inserted_runs() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public AS $$
BEGIN
    -- Tenants in id order: two multi-tenant inserts never wait for each other in a cycle.
    UPDATE public.tenant_load l SET
        queued  = l.queued  + n.queued,
        running = l.running + n.running,
        waiting = l.waiting + n.waiting
    FROM (SELECT i.tenant_id,
                 count(*) FILTER (WHERE i.status = 'queued')::int  AS queued,
                 count(*) FILTER (WHERE i.status = 'running')::int AS running,
                 count(*) FILTER (WHERE i.status = 'waiting')::int AS waiting
          FROM inserted i
          WHERE i.status IN ('queued', 'running', 'waiting')
          GROUP BY i.tenant_id ORDER BY i.tenant_id) n
    WHERE l.tenant_id = n.tenant_id;
    RETURN NULL;
END
$$;

CREATE OR REPLACE TRIGGER runs_count_inserted AFTER INSERT ON runs
    REFERENCING NEW TABLE AS inserted
    FOR EACH STATEMENT EXECUTE FUNCTION tenantry_count_inserted_runs();
