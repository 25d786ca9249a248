-- The wake on a tool server's connection (issue 39): when its OAuth connection becomes
-- 'connected' (a callback exchanged a code, a client-credentials grant answered), the
-- tenant's runs waiting for it go back to the queue, in the same transaction (their status
-- change notifies the workers, tenantry_runnable). A run that parks after this commits
-- finds the connection connected under its row lock and does not wait (runs/waiting.py).

CREATE OR REPLACE FUNCTION tenantry_wake_authorized() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public AS $$
BEGIN
    UPDATE public.runs
    SET status = 'queued', waiting_tool_server = NULL, available_at = NULL, updated_at = now()
    WHERE tenant_id = NEW.tenant_id AND waiting_tool_server = NEW.server_id
      AND status = 'waiting';
    RETURN NULL;
END
$$;
REVOKE ALL ON FUNCTION tenantry_wake_authorized() FROM PUBLIC, tenantry_app, tenantry_console;

CREATE OR REPLACE TRIGGER tool_server_oauth_wake_authorized
    AFTER UPDATE OF status ON tool_server_oauth
    FOR EACH ROW
    WHEN (NEW.status = 'connected' AND OLD.status IS DISTINCT FROM NEW.status)
    EXECUTE FUNCTION tenantry_wake_authorized();
