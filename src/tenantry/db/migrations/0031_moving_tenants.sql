-- Moving a tenant to another cell (issue 20 item 4, ADR 0029). The move is driven from
-- outside (`tenantry cells move`, src/tenantry/cells/move.py); what a cell must do for it
-- is here: hold a tenant still while its rows are copied, and never run it in two cells.
--
-- A frozen tenant, on the cell it leaves:
--   draining  admits nothing (new runs: 'moving', the API: 503 tenant_moving); no claim,
--             wake, expiry, webhook, sweep or retention pass touches its rows; a run in
--             flight goes back to the queue at its next step's commit (hand_back).
--   locked    once none of its runs holds a lease: besides, any insert or update of its
--             runs, approvals, agents, keys, secrets, settings is refused (TR020), so the
--             rows copied are the rows there. The copy is taken in this state.
--   moved     the directory points at the new cell; its rows here are deleted next.
-- and on the cell it arrives at:
--   arriving  its rows are being copied in (with triggers off, as a replica's apply does);
--             nothing claims them until the directory points here and the row is deleted.
--
-- Its functions and triggers are routines now, each the source of its latest definition
-- (src/tenantry/db/routines/, ADR 0037): frozen_tenants, frozen_changed, refuse_frozen,
-- claim_runs, claim_runs_fifo, claim_activities, claim_activity_next, claim_webhooks,
-- wake_parked, expired_approvals, sweep_reservations, claim_blob_deletions, cleanup_due,
-- take_cleanup_lease, keep_cleanup_lease, create_runs, commit_step.

CREATE TABLE frozen_tenants (
    tenant_id  text PRIMARY KEY,  -- no foreign key: an arriving tenant has no row yet
    state      text NOT NULL CHECK (state IN ('draining', 'locked', 'moved', 'arriving')),
    move_id    uuid NOT NULL,
    since      timestamptz NOT NULL DEFAULT now()
);
REVOKE ALL ON frozen_tenants FROM PUBLIC;
-- The API's authentication and the intake read it (ids of tenants in a move, no more).
GRANT SELECT ON frozen_tenants TO tenantry_app;

-- Every claim, wake, expiry, sweep and retention pass leaves a frozen tenant's rows out;
-- the step's commit also answers hand_back: a third OUT column, a new result type, so
-- the commit of 0030 goes (a database migrated before routines still has it).
DROP FUNCTION IF EXISTS tenantry_commit_step(text, uuid, bigint, text[], jsonb[], smallint[],
    jsonb[], integer, bigint, bigint, bigint, double precision, jsonb, jsonb, jsonb, jsonb);
