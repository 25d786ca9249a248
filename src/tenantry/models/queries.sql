-- name: insert_account
INSERT INTO model_accounts (account_id, tenant_id, provider, base_url, models, region, rpm,
                            tpm, priority, secret_name, secret_sealed, secret_nonce,
                            master_key_id, registered_by)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)
ON CONFLICT (account_id) DO NOTHING
RETURNING *

-- name: list_accounts
-- Every enabled account, platform and BYOK: what a worker's gateway routes over.
SELECT * FROM model_accounts WHERE enabled ORDER BY priority, account_id

-- name: get_account
SELECT * FROM model_accounts WHERE account_id = $1

-- name: accounts_page
-- The operator lists: every account (platform and tenants' own, disabled ones too), or
-- one tenant's own; by id, a page after $2.
SELECT * FROM model_accounts
WHERE ($1::text IS NULL OR tenant_id = $1) AND ($2::text IS NULL OR account_id > $2)
ORDER BY account_id
LIMIT $3

-- name: disable_account
UPDATE model_accounts SET enabled = false, updated_at = now()
WHERE account_id = $1 AND enabled
RETURNING *

-- name: wake_parked
SELECT tenantry_wake_parked($1, $2)

-- name: wake_parked_of_tenant
-- What tenantry_wake_parked does, for one tenant's runs (its own account recovered), under
-- its row-level security. Earliest recheck first.
WITH due AS (
    SELECT run_id FROM runs
    WHERE tenant_id = $1 AND status = 'waiting' AND parked_on IS NOT NULL
      AND (parked_on && $2::text[] OR '*' = ANY ($2::text[]))
    ORDER BY available_at
    LIMIT $3
    FOR UPDATE SKIP LOCKED
), woken AS (
    UPDATE runs r
    SET status = 'queued', parked_on = NULL, available_at = NULL, updated_at = now()
    FROM due WHERE r.tenant_id = $1 AND r.run_id = due.run_id
    RETURNING 1
)
SELECT count(*)::integer FROM woken

-- name: capacity_lock
-- Shares of an account change under its advisory lock, so that two holders raising theirs
-- at once cannot both take what is left (ADR 0021). $1 comes sorted: holders renewing the
-- same accounts take their locks in the same order.
SELECT count(pg_advisory_xact_lock(hashtextextended('tenantry.model_capacity:' || a, 0)))
FROM unnest($1::text[]) WITH ORDINALITY AS x(a, i)

-- name: capacity_holders
-- The other live holders of these accounts (read under their locks).
SELECT account_id, holder, demand, share FROM model_capacity_shares
WHERE account_id = ANY($1::text[]) AND holder <> $2 AND expires_at > clock_timestamp()

-- name: capacity_hold
-- This holder's demand and share of each account, leased for $5 seconds; the leases others
-- let run out are deleted on the way (they were already ignored).
WITH gone AS (
    DELETE FROM model_capacity_shares
    WHERE account_id = ANY($1::text[]) AND holder <> $2 AND expires_at <= clock_timestamp()
)
INSERT INTO model_capacity_shares AS s (account_id, holder, demand, share, expires_at)
SELECT a, $2, d, sh, clock_timestamp() + make_interval(secs => $5)
FROM unnest($1::text[], $3::jsonb[], $4::float8[]) AS x(a, d, sh)
ON CONFLICT (account_id, holder) DO UPDATE
SET demand = EXCLUDED.demand, share = EXCLUDED.share, renewed_at = clock_timestamp(),
    expires_at = EXCLUDED.expires_at

-- name: capacity_leave
-- A stopping gateway gives its shares back at once rather than when their leases end.
DELETE FROM model_capacity_shares WHERE holder = $1

-- name: lock_own_accounts
-- A tenant's registrations of its own accounts, one at a time: the count under the cap
-- (own_accounts.py) holds until the insert commits.
SELECT pg_advisory_xact_lock(hashtextextended('tenantry.own_model_accounts:' || $1, 0))

-- name: count_own_accounts
SELECT count(*) FROM model_accounts WHERE tenant_id = $1 AND enabled

-- name: own_account_for_key
-- The tenant's own enabled account whose key is rotated; shared-locked so a disable
-- (which deletes the key it registered) waits, or the rotation sees it disabled.
SELECT * FROM model_accounts
WHERE account_id = $1 AND tenant_id = $2 AND enabled
FOR SHARE

-- name: disable_own_account
UPDATE model_accounts SET enabled = false, updated_at = now()
WHERE account_id = $1 AND tenant_id = $2 AND enabled
RETURNING *

-- name: own_accounts_reading_secret
-- The tenant's enabled accounts whose key is this vault secret (it may not be removed).
SELECT account_id FROM model_accounts
WHERE tenant_id = $1 AND secret_name = $2 AND enabled
ORDER BY account_id

-- name: own_account
-- One of the tenant's own accounts (disabled ones too); another's is no row.
SELECT * FROM model_accounts WHERE account_id = $1 AND tenant_id = $2
