-- A dead worker with no running run left is forgotten (ADR 0018). Rows another claimer is
-- deleting are skipped (never waited for); one whose key a live session holds again (its
-- worker reconnected) is kept. Called by the claims, which run as the owner.

CREATE OR REPLACE FUNCTION tenantry_forget_dead_workers(p_dead text[]) RETURNS void
LANGUAGE sql VOLATILE SET search_path = pg_catalog, public AS $$
    DELETE FROM public.worker_sessions s
    WHERE s.worker_id IN (
        SELECT d.worker_id FROM public.worker_sessions d
        WHERE d.worker_id = ANY (p_dead)
          AND pg_try_advisory_xact_lock_shared(1415008843, d.lock_key)
          AND NOT EXISTS (SELECT 1 FROM public.runs r
                          WHERE r.lease_owner = d.worker_id AND r.status = 'running')
        ORDER BY d.worker_id
        FOR UPDATE SKIP LOCKED)
$$;
REVOKE ALL ON FUNCTION tenantry_forget_dead_workers(text[])
    FROM PUBLIC, tenantry_app, tenantry_console;
