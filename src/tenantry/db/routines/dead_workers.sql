-- Fast takeover of a dead worker's runs (ADR 0018): registered workers whose session lock
-- (1415008843, lock_key) nobody holds — their processes (or their lock connections) are
-- gone. One probe per registered worker, never one per run. A probe that succeeds holds
-- the lock shared until the caller's transaction ends, so the key cannot be taken by a new
-- registration meanwhile (it picks another; it never waits). Called first by the claims of
-- runs and activity tasks (tenantry_claim_runs, tenantry_claim_activities), which run as
-- the owner; no role may call it.

CREATE OR REPLACE FUNCTION tenantry_dead_workers() RETURNS text[]
LANGUAGE sql VOLATILE SET search_path = pg_catalog, public AS $$
    SELECT coalesce(array_agg(s.worker_id), '{}') FROM public.worker_sessions s
    WHERE pg_try_advisory_xact_lock_shared(1415008843, s.lock_key)
$$;
REVOKE ALL ON FUNCTION tenantry_dead_workers() FROM PUBLIC, tenantry_app, tenantry_console;
