-- Deliveries to tenants' webhook endpoints (ADR 0045), claimed as tenantry_claim_webhooks
-- claims runs' own: due now, for p_seconds, at most p_per_tenant of a tenant less those
-- the claiming worker has in flight for it (p_busy_tenants, p_busy_counts), none of a tenant
-- being moved. In the same statement, deliveries with no attempt left whose last claim
-- lapsed (the worker of the last attempt died mid-way) come back with spent = true, so
-- one worker records each as failed — as tenantry_spent_webhooks does for runs' own.

CREATE OR REPLACE FUNCTION tenantry_claim_endpoint_deliveries(
    p_batch integer, p_seconds double precision, p_max_attempts integer,
    p_per_tenant integer, p_busy_tenants text[], p_busy_counts integer[])
RETURNS TABLE (tenant_id text, run_id uuid, endpoint_id uuid, attempts integer,
               spent boolean)
LANGUAGE sql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, public AS $$
    WITH busy AS (
        SELECT b.tenant_id, b.n FROM unnest(p_busy_tenants, p_busy_counts) AS b(tenant_id, n)
    ), ranked AS (
        SELECT d.tenant_id, d.run_id, d.endpoint_id, d.next_at,
               row_number() OVER (PARTITION BY d.tenant_id ORDER BY d.next_at) AS nth
        FROM public.endpoint_deliveries d
        WHERE d.state = 'pending' AND d.next_at <= now() AND d.attempts < p_max_attempts
          AND d.tenant_id <> ALL (public.tenantry_frozen_tenants())
    ), due AS (
        SELECT d.tenant_id, d.run_id, d.endpoint_id FROM public.endpoint_deliveries d
        JOIN ranked k ON k.tenant_id = d.tenant_id AND k.run_id = d.run_id
                     AND k.endpoint_id = d.endpoint_id
        LEFT JOIN busy b ON b.tenant_id = k.tenant_id
        WHERE k.nth + coalesce(b.n, 0) <= p_per_tenant
          AND d.state = 'pending' AND d.attempts < p_max_attempts
        ORDER BY k.next_at
        LIMIT p_batch
        FOR UPDATE OF d SKIP LOCKED
    ), lapsed AS (
        SELECT d.tenant_id, d.run_id, d.endpoint_id FROM public.endpoint_deliveries d
        WHERE d.state = 'pending' AND d.next_at <= now() AND d.attempts >= p_max_attempts
        ORDER BY d.next_at
        LIMIT p_batch
        FOR UPDATE SKIP LOCKED
    ), claimed AS (
        UPDATE public.endpoint_deliveries d
        SET next_at = now() + make_interval(secs => p_seconds), attempts = d.attempts + 1
        FROM due
        WHERE d.tenant_id = due.tenant_id AND d.run_id = due.run_id
          AND d.endpoint_id = due.endpoint_id
        RETURNING d.tenant_id, d.run_id, d.endpoint_id, d.attempts, false AS spent
    ), spent AS (
        UPDATE public.endpoint_deliveries d
        SET next_at = now() + make_interval(secs => p_seconds)
        FROM lapsed
        WHERE d.tenant_id = lapsed.tenant_id AND d.run_id = lapsed.run_id
          AND d.endpoint_id = lapsed.endpoint_id
        RETURNING d.tenant_id, d.run_id, d.endpoint_id, d.attempts, true AS spent
    )
    SELECT * FROM claimed UNION ALL SELECT * FROM spent
$$;
REVOKE ALL ON FUNCTION tenantry_claim_endpoint_deliveries(integer, double precision, integer,
    integer, text[], integer[]) FROM PUBLIC, tenantry_app, tenantry_console;
GRANT EXECUTE ON FUNCTION tenantry_claim_endpoint_deliveries(integer, double precision,
    integer, integer, text[], integer[]) TO tenantry_app;
