-- Tombstones and audit rows (tool calls' and account changes') past their own policies (NULL days: kept forever), in bounded
-- batches under the cleanup lease's fence (ADR 0017). Deleting audit evidence is itself
-- recorded by the caller (an audit row of its own, outcome `audit_expired`).

CREATE OR REPLACE FUNCTION tenantry_retention_expire(
    p_tenant text, p_owner text, p_epoch bigint, p_tombstones_before timestamptz,
    p_audit_before timestamptz, p_limit integer)
RETURNS TABLE (tombstones integer, audit integer)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public AS $$
DECLARE
    v_tombstones integer := 0;
    v_audit integer := 0;
    v_changes integer := 0;
    -- The immutability triggers' exemption for this call only, as tenantry_retention_batch
    -- sets it (not a SET clause: that needs SET privilege on the parameter on PostgreSQL 15).
    v_was text := coalesce(current_setting('tenantry.retention', true), '');
BEGIN
    PERFORM set_config('tenantry.retention', 'on', true);
    PERFORM 1 FROM public.cleanup_leases l
    WHERE l.tenant_id = p_tenant AND l.owner = p_owner AND l.epoch = p_epoch
      AND l.expires_at > clock_timestamp()
    FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'cleanup lease of tenant % epoch % is no longer held', p_tenant, p_epoch
            USING ERRCODE = 'TR001';
    END IF;
    IF p_tombstones_before IS NOT NULL THEN
        DELETE FROM public.tombstones t WHERE (t.tenant_id, t.run_id) IN (
            SELECT x.tenant_id, x.run_id FROM public.tombstones x
            WHERE x.tenant_id = p_tenant AND x.deleted_at < p_tombstones_before
            LIMIT p_limit);
        GET DIAGNOSTICS v_tombstones = ROW_COUNT;
        UPDATE public.cleanup_leases l
        SET tombstones_expired = l.tombstones_expired + v_tombstones
        WHERE l.tenant_id = p_tenant AND v_tombstones > 0;
    END IF;
    IF p_audit_before IS NOT NULL THEN
        DELETE FROM public.audit_log a WHERE (a.tenant_id, a.audit_id) IN (
            SELECT x.tenant_id, x.audit_id FROM public.audit_log x
            WHERE x.tenant_id = p_tenant AND x.created_at < p_audit_before
              AND x.outcome <> 'audit_expired'
            LIMIT p_limit);
        GET DIAGNOSTICS v_audit = ROW_COUNT;
        DELETE FROM public.account_changes c WHERE (c.tenant_id, c.change_id) IN (
            SELECT x.tenant_id, x.change_id FROM public.account_changes x
            WHERE x.tenant_id = p_tenant AND x.created_at < p_audit_before
            LIMIT greatest(p_limit - v_audit, 0));
        GET DIAGNOSTICS v_changes = ROW_COUNT;
        v_audit := v_audit + v_changes;
    END IF;
    PERFORM set_config('tenantry.retention', v_was, true);
    RETURN QUERY SELECT v_tombstones, v_audit;
END
$$;
REVOKE ALL ON FUNCTION tenantry_retention_expire(text, text, bigint, timestamptz, timestamptz,
    integer) FROM PUBLIC, tenantry_app, tenantry_console;
GRANT EXECUTE ON FUNCTION tenantry_retention_expire(text, text, bigint, timestamptz,
    timestamptz, integer) TO tenantry_app;
