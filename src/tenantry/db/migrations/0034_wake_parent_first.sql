-- Child runs (ADR 0032): the wake of a child's parent moves to a BEFORE trigger.
--
-- As an AFTER trigger (0033) it ran after the child's status change had already updated
-- the tenant's counters (runs_count: tenant_load; runs_count_ended: run_status_totals),
-- so a child's ending took child row → tenant_load → parent row, while a parent starting
-- a child takes parent row → tenant_load (its admission): the two deadlocked under load
-- (the replay gate at 10,000 runs). Before the child's own row is written its row is
-- already locked, and nothing of the tenant's is yet: the order becomes child row →
-- parent row → tenant_load, the same parent-before-load order as every other path.
DROP TRIGGER runs_wake_parent ON runs;
DROP FUNCTION tenantry_wake_parent();

CREATE FUNCTION tenantry_wake_parent() RETURNS trigger
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

CREATE TRIGGER runs_wake_parent BEFORE UPDATE OF status ON runs
FOR EACH ROW
WHEN (NEW.kind = 'agent' AND NEW.parent_run_id IS NOT NULL
      AND NEW.status IN ('finished', 'failed', 'cancelled')
      AND OLD.status NOT IN ('finished', 'failed', 'cancelled'))
EXECUTE FUNCTION tenantry_wake_parent();
