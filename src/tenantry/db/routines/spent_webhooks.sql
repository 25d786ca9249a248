-- Webhook deliveries with no attempt left whose last claim lapsed (the worker of the last
-- attempt died mid-way): claimed like a delivery, so one worker records each as failed.

CREATE OR REPLACE FUNCTION tenantry_spent_webhooks(
    p_batch integer, p_seconds double precision, p_max_attempts integer)
RETURNS TABLE (tenant_id text, run_id uuid, attempts integer)
LANGUAGE sql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, public AS $$
    WITH spent AS (
        SELECT r.tenant_id, r.run_id FROM public.runs r
        WHERE r.webhook_state = 'pending' AND r.webhook_next_at <= now()
          AND r.webhook_attempts >= p_max_attempts
        ORDER BY r.webhook_next_at
        LIMIT p_batch
        FOR UPDATE SKIP LOCKED
    )
    UPDATE public.runs r
    SET webhook_next_at = now() + make_interval(secs => p_seconds)
    FROM spent
    WHERE r.tenant_id = spent.tenant_id AND r.run_id = spent.run_id
    RETURNING r.tenant_id, r.run_id, r.webhook_attempts
$$;
REVOKE ALL ON FUNCTION tenantry_spent_webhooks(integer, double precision, integer)
    FROM PUBLIC, tenantry_app, tenantry_console;
GRANT EXECUTE ON FUNCTION tenantry_spent_webhooks(integer, double precision, integer)
    TO tenantry_app;
