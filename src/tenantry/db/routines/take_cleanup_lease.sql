-- One cleaner per tenant at a time (ADR 0017): the cleanup lease is taken when free or
-- expired (or already ours), the epoch bumped on every take; its epoch fences every batch.
-- Returns the epoch, or NULL when another cleaner holds the tenant or the tenant is being
-- moved to another cell.

CREATE OR REPLACE FUNCTION tenantry_take_cleanup_lease(
    p_tenant text, p_owner text, p_seconds double precision)
RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public AS $$
DECLARE
    v_epoch bigint;
BEGIN
    IF p_tenant = ANY (public.tenantry_frozen_tenants()) THEN
        RETURN NULL;  -- moving: its rows stay as they are until the move ends
    END IF;
    INSERT INTO public.cleanup_leases AS l (tenant_id, owner, epoch, expires_at)
    VALUES (p_tenant, p_owner, 1, clock_timestamp() + make_interval(secs => p_seconds))
    ON CONFLICT (tenant_id) DO UPDATE
        SET owner = p_owner, epoch = l.epoch + 1,
            expires_at = clock_timestamp() + make_interval(secs => p_seconds)
        WHERE l.owner IS NULL OR l.expires_at IS NULL OR l.expires_at < clock_timestamp()
           OR l.owner = p_owner
    RETURNING l.epoch INTO v_epoch;
    RETURN v_epoch;
END
$$;
REVOKE ALL ON FUNCTION tenantry_take_cleanup_lease(text, text, double precision)
    FROM PUBLIC, tenantry_app, tenantry_console;
GRANT EXECUTE ON FUNCTION tenantry_take_cleanup_lease(text, text, double precision)
    TO tenantry_app;
