-- A budget row with closings applied: their estimates leave the reservations, what they
-- cost this month joins the month's spend (a new month starts at zero), the tokens they
-- did not use go back into the bucket (or more come out, when a reply used more).
-- Shared by the fold (tenantry_fold_closings) and its readers' view (tenantry_budget_now),
-- so the two can never disagree. ADR 0024.

CREATE OR REPLACE FUNCTION tenantry_budget_with(
    b tenant_budget, p_estimates bigint, p_month_costs bigint, p_tokens_back bigint)
RETURNS tenant_budget
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, public AS $$
BEGIN
    IF b.spend_month < date_trunc('month', now())::date THEN
        b.spent_micros := 0;
        b.spend_month := date_trunc('month', now())::date;
    END IF;
    b.spent_micros := b.spent_micros + p_month_costs;
    b.reserved_micros := greatest(b.reserved_micros - p_estimates, 0);
    IF b.bucket_tokens IS NOT NULL THEN
        b.bucket_tokens := b.bucket_tokens + p_tokens_back;
    END IF;
    RETURN b;
END
$$;
