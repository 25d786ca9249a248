-- Live tails (SSE) wake on this instead of polling. The payload names the slot only.

CREATE OR REPLACE FUNCTION tenantry_notify_event() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('tenantry_events',
                      NEW.tenant_id || ' ' || NEW.run_id::text || ' ' || NEW.seq::text);
    RETURN NULL;
END
$$;

-- On the partitioned parent, cloned onto every partition (ADR 0026).
CREATE OR REPLACE TRIGGER run_events_notify AFTER INSERT ON run_events
    FOR EACH ROW EXECUTE FUNCTION tenantry_notify_event();
