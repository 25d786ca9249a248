-- Prices are operator data (DESIGN §8): per model, versioned, each version in force from its
-- effective_from until the next one. The built-in table in ledger/pricing.py is the default
-- for a model with no version in force here. A version is never changed or removed, and
-- the API refuses an effective_from in the past, so the price that billed a past call is
-- always the one this table says was in force then (the call's cost is also stored on its
-- event and usage fact, and is never recomputed).
--
-- No row-level security, like model_accounts (ADR 0003): prices have no tenant column —
-- they are the operator's, read whole by every worker to bill every tenant's calls, and
-- only the operator API writes them. Tenants see their costs, never this table.
--
-- The reserved name 'sandbox' is the price of a second of sandbox time (per_second_micros);
-- every other row prices a model's tokens per million, in micro-dollars.
--
-- Its functions and triggers are routines now, each the source of its latest definition
-- (src/tenantry/db/routines/, ADR 0037): refuse_change (prices are immutable),
-- usage_per_tenant.

CREATE TABLE model_prices (
    model               text NOT NULL
                        CHECK (model ~ '^[^[:space:][:cntrl:]*]{1,200}$'),
    effective_from      timestamptz NOT NULL,
    input_per_m         bigint CHECK (input_per_m >= 0),
    cached_input_per_m  bigint CHECK (cached_input_per_m >= 0),
    cache_write_per_m   bigint CHECK (cache_write_per_m >= 0),  -- NULL: the input price
    output_per_m        bigint CHECK (output_per_m >= 0),
    per_second_micros   bigint CHECK (per_second_micros >= 0),
    created_at          timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (model, effective_from),
    CHECK (CASE WHEN model = 'sandbox'
                THEN per_second_micros IS NOT NULL AND input_per_m IS NULL
                     AND cached_input_per_m IS NULL AND cache_write_per_m IS NULL
                     AND output_per_m IS NULL
                ELSE per_second_micros IS NULL AND input_per_m IS NOT NULL
                     AND cached_input_per_m IS NOT NULL AND output_per_m IS NOT NULL END)
);
GRANT SELECT, INSERT ON model_prices TO tenantry_app;

-- Sandbox time is billed (DESIGN §7b): each fact carries its cost at the sandbox price in
-- force when the call completed, and that price's identity. Facts written before this
-- migration were not priced: they keep cost 0 and say so.
ALTER TABLE sandbox_usage_facts
    ADD COLUMN cost_micros bigint NOT NULL DEFAULT 0 CHECK (cost_micros >= 0),
    ADD COLUMN price_version text NOT NULL DEFAULT 'unpriced';
ALTER TABLE sandbox_usage_facts
    ALTER COLUMN cost_micros DROP DEFAULT,
    ALTER COLUMN price_version DROP DEFAULT;

-- The operator's per-tenant report gains the sandbox cost (a new result column: the
-- function is replaced, not altered).
DROP FUNCTION IF EXISTS tenantry_usage_per_tenant(timestamptz, timestamptz);
