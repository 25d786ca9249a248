-- A tenant's token bucket level now, refilled at tokens_per_minute (NULL: no bucket).
-- Read by the fair claim (tenantry_may_claim), the reservation and the console.

CREATE OR REPLACE FUNCTION tenantry_bucket_level(b tenant_budget, p tenant_policies)
RETURNS double precision
LANGUAGE sql STABLE SET search_path = pg_catalog, public AS $$
    SELECT CASE WHEN p.tokens_per_minute IS NULL THEN NULL ELSE
        least(p.tokens_per_minute::float8,
              coalesce(b.bucket_tokens, p.tokens_per_minute::float8)
              + extract(epoch FROM now() - b.bucket_at) * p.tokens_per_minute / 60.0)
    END
$$;
