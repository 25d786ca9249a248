-- Child runs (runs/child_step.py). Every statement is scoped by tenant first and runs in
-- the tenant's transaction (row-level security checks it again). A parent and its
-- children are always one tenant's.

-- name: child_ending
-- How a child stands, and what it and its own children (to any depth) have spent: all of
-- it counts against the parent's max_cost_micros.
WITH RECURSIVE tree AS (
    SELECT run_id, cost_micros FROM runs WHERE tenant_id = $1 AND run_id = $2
    UNION ALL
    SELECT c.run_id, c.cost_micros FROM runs c JOIN tree t
      ON c.tenant_id = $1 AND c.parent_run_id = t.run_id AND c.kind = 'agent'
)
SELECT r.status, r.answer, r.error, (SELECT sum(cost_micros) FROM tree)::bigint AS spent
FROM runs r WHERE r.tenant_id = $1 AND r.run_id = $2

-- name: live_children
SELECT run_id FROM runs
WHERE tenant_id = $1 AND parent_run_id = $2 AND kind = 'agent'
  AND status NOT IN ('finished', 'failed', 'cancelled')
ORDER BY run_id
