-- Child runs (issue 21, runs/child_step.py): an agent run starts another agent's run for
-- its start_agent call and waits for it with its slot given back (status 'waiting').
--
-- Whatever ends the child — its worker's last step, a cancellation of a queued or waiting
-- child through the API, a cancelling parent — the child's end wakes its parent, in the
-- same transaction. The parent's row is locked first, whatever its status: the parent
-- reads its child's status and parks under the same lock (runs/child_step.py), so an
-- ending can never fall between the parent's look and its park. Lock order: the child's
-- row, then its parent's — the order every path that ends a child already holds; nothing
-- locks a parent and then waits for one of its children's rows.
CREATE FUNCTION tenantry_wake_parent() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM 1 FROM runs
    WHERE tenant_id = NEW.tenant_id AND run_id = NEW.parent_run_id AND kind = 'agent'
    FOR UPDATE;
    UPDATE runs SET status = 'queued', updated_at = now()
    WHERE tenant_id = NEW.tenant_id AND run_id = NEW.parent_run_id AND kind = 'agent'
      AND status = 'waiting';
    RETURN NULL;
END $$;

CREATE TRIGGER runs_wake_parent AFTER UPDATE OF status ON runs
FOR EACH ROW
WHEN (NEW.kind = 'agent' AND NEW.parent_run_id IS NOT NULL
      AND NEW.status IN ('finished', 'failed', 'cancelled')
      AND OLD.status NOT IN ('finished', 'failed', 'cancelled'))
EXECUTE FUNCTION tenantry_wake_parent();
