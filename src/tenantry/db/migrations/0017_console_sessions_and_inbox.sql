-- The operator console: its session epoch, and its approvals inbox by tenant.
--
-- The session epoch. A session cookie names the epoch it was issued in
-- (under its MAC); revoking sessions ("sign out everywhere", POST /admin/v1/sessions/revoke)
-- moves the epoch on, so every cookie issued before is refused by every API process at its
-- next request, whatever its expiry. One row, operator-wide: no tenant owns it.
CREATE TABLE console_session_epoch (
    singleton  boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    epoch      bigint NOT NULL DEFAULT 1 CHECK (epoch >= 1),
    revoked_at timestamptz
);
INSERT INTO console_session_epoch DEFAULT VALUES;
GRANT SELECT, UPDATE (epoch, revoked_at) ON console_session_epoch TO tenantry_app;

-- The approvals inbox by tenant, so one tenant's thousands of pending approvals cannot push
-- another tenant's one off the page: the tenants with pending approvals (the longest
-- waiting first), how many each has and since when, and each one's first p_each of them.
-- One row per approval shown; a tenant's count and oldest repeat on each of its rows.
CREATE FUNCTION tenantry_console_pending_by_tenant(p_tenants integer, p_each integer)
RETURNS TABLE (tenant_id text, pending bigint, oldest timestamptz, approval_id uuid,
               run_id uuid, key text, tool text, arguments jsonb, requested_at timestamptz,
               expires_at timestamptz)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public AS $$
    WITH waiting AS (
        SELECT a.tenant_id, count(*) AS pending, min(a.requested_at) AS oldest
        FROM public.approvals a
        WHERE a.status = 'pending'
        GROUP BY a.tenant_id
        ORDER BY oldest, a.tenant_id
        LIMIT least(greatest(p_tenants, 1), 200)
    )
    SELECT w.tenant_id, w.pending, w.oldest, f.approval_id, f.run_id, f.key, f.tool,
           f.arguments, f.requested_at, f.expires_at
    FROM waiting w
    CROSS JOIN LATERAL (
        SELECT a.approval_id, a.run_id, a.key, a.tool, a.arguments, a.requested_at,
               a.expires_at
        FROM public.approvals a
        WHERE a.tenant_id = w.tenant_id AND a.status = 'pending'
        ORDER BY a.approval_id
        LIMIT least(greatest(p_each, 1), 50)
    ) f
    ORDER BY w.oldest, w.tenant_id, f.approval_id
$$;
REVOKE ALL ON FUNCTION tenantry_console_pending_by_tenant(integer, integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION tenantry_console_pending_by_tenant(integer, integer)
    TO tenantry_console;

-- One tenant's pending approvals, oldest first: the inbox filtered by tenant, page by page.
CREATE FUNCTION tenantry_console_pending_approvals_of(p_tenant text, p_after uuid,
                                                      p_limit integer)
RETURNS TABLE (tenant_id text, approval_id uuid, run_id uuid, key text, tool text,
               arguments jsonb, requested_at timestamptz, expires_at timestamptz)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public AS $$
    SELECT a.tenant_id, a.approval_id, a.run_id, a.key, a.tool, a.arguments,
           a.requested_at, a.expires_at
    FROM public.approvals a
    WHERE a.tenant_id = p_tenant AND a.status = 'pending'
      AND (p_after IS NULL OR a.approval_id > p_after)
    ORDER BY a.approval_id
    LIMIT least(greatest(p_limit, 1), 200)
$$;
REVOKE ALL ON FUNCTION tenantry_console_pending_approvals_of(text, uuid, integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION tenantry_console_pending_approvals_of(text, uuid, integer)
    TO tenantry_console;
