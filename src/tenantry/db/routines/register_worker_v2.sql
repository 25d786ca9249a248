-- Fast takeover of a dead worker's runs (ADR 0018). A worker loop holds a session-level
-- advisory lock, (1415008843, its key), on a connection it keeps open for its life;
-- Postgres releases it the moment the process dies (or the connection drops). 1415008843
-- is b'TWRK': the class of the two-int advisory keys, apart from every one-bigint key (the
-- migrations' lock).
--
-- Called on the worker's own long-lived connection: takes the session lock, then records
-- the worker under that key with its release (p_release: what `tenantry migrate --status`
-- counts, migration 0041). Never waits: 'key_taken' (a live session holds the key, or a
-- registered worker, dead or reconnecting, owns it) and 'id_taken' (the id is another
-- worker's) tell the caller to try another key or id; the lock is not kept then. A worker
-- whose lock connection dropped comes back with p_rejoin: its row is kept or re-made,
-- under the new key if its old one was taken meanwhile.

CREATE OR REPLACE FUNCTION tenantry_register_worker_v2(
    p_worker text, p_key integer, p_rejoin boolean, p_release text)
RETURNS text
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, public AS $$
DECLARE
    v_constraint text;
BEGIN
    IF NOT pg_try_advisory_lock(1415008843, p_key) THEN
        RETURN 'key_taken';
    END IF;
    BEGIN
        IF p_rejoin THEN
            INSERT INTO public.worker_sessions (worker_id, lock_key, release)
            VALUES (p_worker, p_key, p_release)
            ON CONFLICT (worker_id) DO UPDATE
                SET lock_key = EXCLUDED.lock_key, locked_at = now(),
                    release = EXCLUDED.release;
        ELSE
            INSERT INTO public.worker_sessions (worker_id, lock_key, release)
            VALUES (p_worker, p_key, p_release);
        END IF;
    EXCEPTION WHEN unique_violation THEN
        -- A session lock is not undone by the rollback of this block: let it go by hand.
        GET STACKED DIAGNOSTICS v_constraint = CONSTRAINT_NAME;
        PERFORM pg_advisory_unlock(1415008843, p_key);
        RETURN CASE WHEN v_constraint = 'worker_sessions_pkey' THEN 'id_taken'
                    ELSE 'key_taken' END;
    END;
    RETURN 'registered';
END
$$;
REVOKE ALL ON FUNCTION tenantry_register_worker_v2(text, integer, boolean, text)
    FROM PUBLIC, tenantry_app, tenantry_console;
GRANT EXECUTE ON FUNCTION tenantry_register_worker_v2(text, integer, boolean, text)
    TO tenantry_app;
