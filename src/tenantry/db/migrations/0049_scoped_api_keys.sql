-- API keys with scopes and an expiry, and who made each (issue 41, ADR 0043).
-- Expand only: three nullable columns; the previous release neither reads nor writes them,
-- and its keys (scopes NULL) keep every power they had.

-- NULL: a key made before scopes, holding every scope. Otherwise the scopes it holds (the
-- names are checked where a request names them: a later release may add scopes).
ALTER TABLE api_keys ADD COLUMN scopes text[]
    CHECK (scopes IS NULL OR cardinality(scopes) BETWEEN 1 AND 32);
-- After this instant the key authenticates no request.
ALTER TABLE api_keys ADD COLUMN expires_at timestamptz;
-- Who made it: `operator`, `key:<key id>` (a tenant's keys:manage key), `user:<id>`.
ALTER TABLE api_keys ADD COLUMN created_by text
    CHECK (created_by IS NULL OR length(created_by) BETWEEN 1 AND 200);
-- What a rotation replaced: the key this one took over from (its name and scopes).
ALTER TABLE api_keys ADD COLUMN replaces uuid;
