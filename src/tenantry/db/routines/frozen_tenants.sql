-- The tenants being moved to another cell (ADR 0029): every claim, wake, expiry, sweep and
-- retention pass leaves their rows out. Read once per claim; an empty table (no move under
-- way) costs one index-only probe.

CREATE OR REPLACE FUNCTION tenantry_frozen_tenants() RETURNS text[]
LANGUAGE sql STABLE SET search_path = pg_catalog, public AS $$
    SELECT coalesce(array_agg(f.tenant_id), '{}') FROM public.frozen_tenants f
$$;
