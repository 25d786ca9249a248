-- Child runs (ADR 0032): an agent run starts another agent's run for its
-- start_agent call and waits for it with its slot given back (status 'waiting'). Whatever
-- ends the child — its worker's last step, a cancellation of a queued or waiting child
-- through the API, a cancelling parent — the child's end wakes its parent, in the same
-- transaction. The parent's row is locked first, whatever its status: the parent reads its
-- child's status and parks under the same lock (runs/child_step.py), so an ending can never
-- fall between the parent's look and its park.
--
-- A BEFORE trigger: before the child's own row is written its row is already locked, and
-- nothing of the tenant's is yet, so the lock order is child row → parent row →
-- tenant_load, the same parent-before-load order as every other path. As an AFTER trigger
-- it ran after the child's status change had updated the tenant's counters (child row →
-- tenant_load → parent row), while a parent starting a child takes parent row →
-- tenant_load: the two deadlocked under load. Nothing locks a parent and then waits for one
-- of its children's rows.

CREATE OR REPLACE FUNCTION tenantry_wake_parent() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM 1 FROM runs
    WHERE tenant_id = NEW.tenant_id AND run_id = NEW.parent_run_id AND kind = 'agent'
    FOR UPDATE;
    UPDATE runs SET status = 'queued', updated_at = now()
    WHERE tenant_id = NEW.tenant_id AND run_id = NEW.parent_run_id AND kind = 'agent'
      AND status = 'waiting';
    RETURN NEW;
END $$;

CREATE OR REPLACE TRIGGER runs_wake_parent BEFORE UPDATE OF status ON runs
    FOR EACH ROW
    WHEN (NEW.kind = 'agent' AND NEW.parent_run_id IS NOT NULL
          AND NEW.status IN ('finished', 'failed', 'cancelled')
          AND OLD.status NOT IN ('finished', 'failed', 'cancelled'))
    EXECUTE FUNCTION tenantry_wake_parent();
