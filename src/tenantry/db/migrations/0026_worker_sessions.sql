-- Fast takeover of a dead worker's runs (issue 19 item 3, ADR 0018). A worker loop holds a
-- session-level advisory lock, (1415008843, its key), on a connection it keeps open for
-- its life; Postgres releases it the moment the process dies (or the connection drops).
-- The claim probes the registered workers' locks and re-leases the running runs of those
-- whose lock nobody holds at once, instead of waiting out their leases. A worker that is
-- merely frozen still holds its lock: only its lease's expiry moves its runs, and the epoch
-- fences whatever it writes after that (unchanged). 1415008843 is b'TWRK': the class of
-- the two-int advisory keys, apart from every one-bigint key (the migrations' lock).
--
-- Its functions and triggers are routines now, each the source of its latest definition
-- (src/tenantry/db/routines/, ADR 0037): register_worker, dead_workers,
-- forget_dead_workers, claim_runs, claim_activities.

CREATE TABLE worker_sessions (
    worker_id   text PRIMARY KEY,  -- the runs' lease_owner
    lock_key    integer NOT NULL UNIQUE,  -- held as pg_advisory_lock(1415008843, lock_key)
    started_at  timestamptz NOT NULL DEFAULT now(),
    locked_at   timestamptz NOT NULL DEFAULT now()  -- last (re)registration
);
REVOKE ALL ON worker_sessions FROM PUBLIC;

-- A dead owner's running runs, found without reading every running run.
CREATE INDEX runs_running_by_owner ON runs (lease_owner) WHERE status = 'running';

-- The fair claim first re-leases the runs of dead registered workers, and returns three
-- more columns saying what a re-leased run was taken from: a new result type, so the claim
-- of 0013 goes (a database migrated before routines still has it).
DROP FUNCTION IF EXISTS tenantry_claim_runs(text, integer, double precision, text, boolean);
