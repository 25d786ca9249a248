-- What a tenant's budget row says once its closings are folded, without folding them, and
-- with its open uncounted reservations among the reserved: for readers (the policy API's
-- load, the console, admission's and the claim's cap checks). RLS: a tenant's own rows.
-- Settlements off the budget row: ADR 0024.

CREATE OR REPLACE FUNCTION tenantry_budget_now(b tenant_budget) RETURNS tenant_budget
LANGUAGE sql STABLE SET search_path = pg_catalog, public AS $$
    SELECT public.tenantry_budget_with(
        b,
        (coalesce(sum(r.cost_micros) FILTER (WHERE r.unfolded AND r.counted), 0)
         - coalesce(sum(r.cost_micros) FILTER (
               WHERE r.status = 'reserved' AND NOT r.counted), 0))::bigint,
        coalesce(sum(r.spent_micros) FILTER (
            WHERE r.unfolded AND r.closed_at >= date_trunc('month', now())), 0)::bigint,
        coalesce(sum(CASE WHEN r.counted THEN r.tokens ELSE 0 END - r.spent_tokens)
                 FILTER (WHERE r.unfolded), 0)::bigint)
    FROM public.budget_reservations r
    WHERE r.tenant_id = b.tenant_id
      AND (r.unfolded OR (r.status = 'reserved' AND NOT r.counted))
$$;
