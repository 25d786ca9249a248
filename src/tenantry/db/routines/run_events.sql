-- A run's events after a slot, in one call (the worker loading or catching up on a run, the
-- API serving its event stream; ADR 0023), payloads over the inline cap joined back: the
-- tenant set by the function, RLS as the caller.

CREATE OR REPLACE FUNCTION tenantry_run_events(p_tenant text, p_run uuid, p_after integer,
                                               p_limit integer)
RETURNS TABLE (seq integer, type text, data jsonb, created_at timestamptz, format smallint)
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, public AS $$
BEGIN
    PERFORM set_config('tenantry.tenant_id', p_tenant, true);
    RETURN QUERY
    SELECT e.seq, e.type, coalesce(p.data, e.data), e.created_at, e.format
    FROM public.run_events e
    LEFT JOIN public.run_event_payloads p
      ON p.tenant_id = e.tenant_id AND p.run_id = e.run_id AND p.seq = e.seq
    WHERE e.tenant_id = p_tenant AND e.run_id = p_run AND e.seq > p_after
    ORDER BY e.seq
    LIMIT p_limit;
END
$$;
REVOKE ALL ON FUNCTION tenantry_run_events(text, uuid, integer, integer)
    FROM PUBLIC, tenantry_app, tenantry_console;
GRANT EXECUTE ON FUNCTION tenantry_run_events(text, uuid, integer, integer) TO tenantry_app;
