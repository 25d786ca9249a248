-- Billing reconciliation (docs/decisions/0007-billing-reconcile.md): our usage facts per
-- provider account and UTC day, compared with the provider's own usage export.

-- The provider bills an account (an organization's key) across all our tenants, so the
-- comparison reads every tenant's facts of one account: by account and time.
CREATE INDEX usage_facts_by_account ON usage_facts (account, created_at);

-- One account's usage per UTC day over [p_from, p_to), across tenants. A definer function
-- like the operator usage report: sums only, never a tenant's runs or content.
CREATE FUNCTION tenantry_usage_per_account_day(p_account text, p_from timestamptz,
                                               p_to timestamptz)
RETURNS TABLE (day date, calls bigint, input_tokens numeric, cached_input_tokens numeric,
               cache_write_input_tokens numeric, output_tokens numeric, cost_micros numeric)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public AS $$
    SELECT (f.created_at AT TIME ZONE 'UTC')::date, count(*), sum(f.input_tokens),
           sum(f.cached_input_tokens), sum(f.cache_write_input_tokens), sum(f.output_tokens),
           sum(f.cost_micros)
    FROM public.usage_facts f
    WHERE f.account = p_account AND f.created_at >= p_from AND f.created_at < p_to
    GROUP BY 1 ORDER BY 1
$$;
REVOKE ALL ON FUNCTION tenantry_usage_per_account_day(text, timestamptz, timestamptz)
    FROM PUBLIC;
GRANT EXECUTE ON FUNCTION tenantry_usage_per_account_day(text, timestamptz, timestamptz)
    TO tenantry_app;

-- Operator data (no tenant): each reconciliation run, with its per-day rows, so the console
-- can show the last ones per account. Append-only: a past check is evidence.
CREATE TABLE billing_reconciliations (
    reconciliation_id   uuid PRIMARY KEY,
    account             text NOT NULL,
    provider            text NOT NULL,
    from_day            date NOT NULL,
    to_day              date NOT NULL CHECK (to_day >= from_day),
    source              text NOT NULL CHECK (source IN ('export', 'fetch')),
    cost_compared       boolean NOT NULL,
    flagged_days        integer NOT NULL CHECK (flagged_days >= 0),
    days                jsonb NOT NULL,
    created_at          timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX billing_reconciliations_by_account
    ON billing_reconciliations (account, created_at DESC);
CREATE TRIGGER billing_reconciliations_immutable
    BEFORE UPDATE OR DELETE ON billing_reconciliations
    FOR EACH ROW EXECUTE FUNCTION tenantry_refuse_change();
GRANT SELECT, INSERT ON billing_reconciliations TO tenantry_app;
