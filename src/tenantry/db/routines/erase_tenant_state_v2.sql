-- tenantry_erase_tenant_state (kept for the previous release), and the tenant's webhook
-- endpoints go too (ADR 0045).
--
-- Erasure's crypto-shredding (ADR 0017): the tenant's sealed secrets, its data key (without
-- which any copy of them, in a backup too, opens for nobody) and its tool servers; its API
-- keys are revoked, its own model accounts disabled (their keys went with its secrets;
-- workers stop routing over them), its users (with their sign-in links and sessions)
-- deleted. Returns how many secrets and tool servers went. The operator's act:
-- the console role's alone (ADR 0011), never the tenant API's pool.

CREATE OR REPLACE FUNCTION tenantry_erase_tenant_state_v2(p_tenant text)
RETURNS TABLE (secrets integer, tool_servers integer)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public AS $$
DECLARE
    v_secrets integer;
    v_servers integer;
BEGIN
    DELETE FROM public.secrets s WHERE s.tenant_id = p_tenant;
    GET DIAGNOSTICS v_secrets = ROW_COUNT;
    DELETE FROM public.tenant_keys k WHERE k.tenant_id = p_tenant;
    DELETE FROM public.tool_servers s WHERE s.tenant_id = p_tenant;
    GET DIAGNOSTICS v_servers = ROW_COUNT;
    -- Its webhook endpoints (ADR 0045), and with them the deliveries not yet made: the
    -- runs its erase cancels next are announced to no one.
    DELETE FROM public.webhook_endpoints w WHERE w.tenant_id = p_tenant;
    UPDATE public.api_keys SET revoked_at = coalesce(revoked_at, now())
    WHERE tenant_id = p_tenant;
    UPDATE public.model_accounts SET enabled = false, updated_at = now()
    WHERE tenant_id = p_tenant AND enabled;
    -- Its people (their addresses are personal data), their links and sessions: gone.
    DELETE FROM public.app_sessions s WHERE s.tenant_id = p_tenant;
    DELETE FROM public.sign_in_links l WHERE l.tenant_id = p_tenant;
    DELETE FROM public.tenant_users u WHERE u.tenant_id = p_tenant;
    RETURN QUERY SELECT v_secrets, v_servers;
END
$$;
REVOKE ALL ON FUNCTION tenantry_erase_tenant_state_v2(text)
    FROM PUBLIC, tenantry_app, tenantry_console;
GRANT EXECUTE ON FUNCTION tenantry_erase_tenant_state_v2(text) TO tenantry_console;
