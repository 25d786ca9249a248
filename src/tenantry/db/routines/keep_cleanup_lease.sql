-- Renew (or end, p_seconds NULL) a cleanup lease we hold (ADR 0017); false when it is no
-- longer ours — or its tenant is being moved to another cell: that pass stops at once.

CREATE OR REPLACE FUNCTION tenantry_keep_cleanup_lease(
    p_tenant text, p_owner text, p_epoch bigint, p_seconds double precision, p_deleted bigint)
RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public AS $$
BEGIN
    UPDATE public.cleanup_leases SET
        expires_at = CASE WHEN p_seconds IS NULL THEN NULL
                          ELSE clock_timestamp() + make_interval(secs => p_seconds) END,
        owner = CASE WHEN p_seconds IS NULL THEN NULL ELSE owner END,
        last_pass_at = CASE WHEN p_seconds IS NULL THEN clock_timestamp() ELSE last_pass_at END,
        last_deleted = CASE WHEN p_seconds IS NULL THEN p_deleted ELSE last_deleted END
    WHERE tenant_id = p_tenant AND owner = p_owner AND epoch = p_epoch
      AND expires_at >= clock_timestamp()
      AND p_tenant <> ALL (public.tenantry_frozen_tenants());  -- a moving tenant's pass stops at once
    RETURN FOUND;
END
$$;
REVOKE ALL ON FUNCTION tenantry_keep_cleanup_lease(text, text, bigint, double precision,
    bigint) FROM PUBLIC, tenantry_app, tenantry_console;
GRANT EXECUTE ON FUNCTION tenantry_keep_cleanup_lease(text, text, bigint, double precision,
    bigint) TO tenantry_app;
