-- Webhook deliveries due now, across tenants, claimed for p_seconds so two workers do not
-- send the same one at the same time (delivery is at-least-once; receivers dedupe by run).
--
-- Bounded: a delivery that used up its attempts is never claimed again (a
-- worker that died on the last attempt cannot make every other worker retry it forever;
-- tenantry_spent_webhooks records it as failed), and one claim hands out at most
-- p_per_tenant deliveries of a tenant, less those the claiming worker already has in
-- flight for it (p_busy_tenants and p_busy_counts, side by side), so one tenant's many slow
-- receivers cannot take every delivery slot of a worker. None of a tenant being moved to
-- another cell.

CREATE OR REPLACE FUNCTION tenantry_claim_webhooks(
    p_batch integer, p_seconds double precision, p_max_attempts integer,
    p_per_tenant integer, p_busy_tenants text[], p_busy_counts integer[])
RETURNS TABLE (tenant_id text, run_id uuid, attempts integer)
LANGUAGE sql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, public AS $$
    WITH busy AS (
        SELECT b.tenant_id, b.n FROM unnest(p_busy_tenants, p_busy_counts) AS b(tenant_id, n)
    ), ranked AS (
        SELECT r.tenant_id, r.run_id, r.webhook_next_at,
               row_number() OVER (PARTITION BY r.tenant_id ORDER BY r.webhook_next_at) AS nth
        FROM public.runs r
        WHERE r.webhook_state = 'pending' AND r.webhook_next_at <= now()
          AND r.webhook_attempts < p_max_attempts
          AND r.tenant_id <> ALL (public.tenantry_frozen_tenants())
    ), due AS (
        SELECT r.tenant_id, r.run_id FROM public.runs r
        JOIN ranked k ON k.tenant_id = r.tenant_id AND k.run_id = r.run_id
        LEFT JOIN busy b ON b.tenant_id = k.tenant_id
        WHERE k.nth + coalesce(b.n, 0) <= p_per_tenant
          AND r.webhook_state = 'pending' AND r.webhook_attempts < p_max_attempts
        ORDER BY k.webhook_next_at
        LIMIT p_batch
        FOR UPDATE OF r SKIP LOCKED
    )
    UPDATE public.runs r
    SET webhook_next_at = now() + make_interval(secs => p_seconds),
        webhook_attempts = r.webhook_attempts + 1
    FROM due
    WHERE r.tenant_id = due.tenant_id AND r.run_id = due.run_id
    RETURNING r.tenant_id, r.run_id, r.webhook_attempts
$$;
REVOKE ALL ON FUNCTION tenantry_claim_webhooks(integer, double precision, integer, integer,
    text[], integer[]) FROM PUBLIC, tenantry_app, tenantry_console;
GRANT EXECUTE ON FUNCTION tenantry_claim_webhooks(integer, double precision, integer, integer,
    text[], integer[]) TO tenantry_app;
