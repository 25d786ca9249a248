-- This month's spend including reservations (a new month starts at zero), closings not yet
-- folded counted at what they cost (tenantry_budget_now, ADR 0024). Admission and the fair
-- claim decide on it.

CREATE OR REPLACE FUNCTION tenantry_month_spend(b tenant_budget) RETURNS bigint
LANGUAGE sql STABLE SET search_path = pg_catalog, public AS $$
    SELECT CASE WHEN n.spend_month < date_trunc('month', now())::date THEN n.reserved_micros
                ELSE n.spent_micros + n.reserved_micros END
    FROM public.tenantry_budget_now(b) n
$$;
