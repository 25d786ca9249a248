-- Shedding under overload (DESIGN §7b, ADR 0008): past the first level of cell load the
-- claim serves steps of runs already in flight — of every tenant — before the first step
-- of any new run. Below it the claim is unchanged (in flight first only inside a tenant).
--
-- Its functions and triggers are routines now, each the source of its latest definition
-- (src/tenantry/db/routines/, ADR 0037): claim_runs.

-- Which tenants have an in-flight run ready to go on: read by the claim only while the
-- cell is overloaded. Small: only runs back in the queue after a step
-- (approvals, parks, tool waits), never the backlog of new runs.
CREATE INDEX runs_queued_in_flight ON runs (tenant_id, kind, available_at)
    WHERE status = 'queued' AND steps > 0;

-- The fair claim takes one more argument, p_in_flight_first (the caller's view of the
-- cell's load): the claim of 0007 goes (a database migrated before routines still has it).
DROP FUNCTION IF EXISTS tenantry_claim_runs(text, integer, double precision, text);
