-- API keys with scopes and an expiry, and who made each; the account's audit trail
-- (issue 41, ADR 0043). Expand only: nullable columns and a new table; the previous
-- release neither reads nor writes them, and its keys (scopes NULL) keep every power.

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

-- The account's own audit trail: every change to the tenant's account — a key made or
-- revoked, a tool server registered, a secret stored, a version promoted, an approval
-- decided — with who made it (`key:<id>`, `user:<id>`, `operator`). Written by the API
-- for each such request that succeeded (api/audit_trail.py); never the request's body
-- (it may hold a secret). Append-only, expired by the tenant's audit-retention policy
-- like audit_log (routines retention_expire, refuse_change_but_retention).
CREATE TABLE account_changes (
    tenant_id   text NOT NULL,
    change_id   uuid NOT NULL,  -- UUIDv7: in the order they were made
    actor       text NOT NULL CHECK (length(actor) BETWEEN 1 AND 200),
    action      text NOT NULL CHECK (length(action) BETWEEN 1 AND 300),
    target      text NOT NULL CHECK (length(target) BETWEEN 1 AND 2000),
    status      smallint NOT NULL CHECK (status BETWEEN 100 AND 599),
    created_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, change_id)
);
CREATE INDEX account_changes_by_time ON account_changes (tenant_id, created_at);
ALTER TABLE account_changes ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON account_changes
    USING (tenant_id = tenantry_current_tenant());
GRANT SELECT, INSERT ON account_changes TO tenantry_app;

-- The tool-call audit read newest first, a page at a time (GET /v1/audit).
CREATE INDEX audit_log_by_time ON audit_log (tenant_id, created_at);
