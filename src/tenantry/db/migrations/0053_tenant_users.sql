-- A tenant's people and their sign-in to the tenant console (issue 41, ADR 0043 §5-6).
-- Expand only: three new tables; the previous release neither reads nor writes them.

-- A tenant's user: an email and a role (a fixed set of scopes, ROLES in
-- tenants/scopes.py). Disabled, never deleted: the audit trail names them by id.
CREATE TABLE tenant_users (
    tenant_id   text NOT NULL REFERENCES tenants (tenant_id),
    user_id     uuid NOT NULL,  -- UUIDv7, shown as usr_<32 hex>
    email       text NOT NULL CHECK (length(email) BETWEEN 3 AND 254),
    role        text NOT NULL CHECK (role IN ('viewer', 'approver', 'developer', 'admin')),
    created_by  text NOT NULL CHECK (length(created_by) BETWEEN 1 AND 200),
    created_at  timestamptz NOT NULL DEFAULT now(),
    disabled_at timestamptz,
    PRIMARY KEY (tenant_id, user_id)
);
-- One user per address in a tenant (compared as the address is written, lower-cased).
CREATE UNIQUE INDEX tenant_users_email ON tenant_users (tenant_id, lower(email));
ALTER TABLE tenant_users ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON tenant_users
    USING (tenant_id = tenantry_current_tenant());
GRANT SELECT, INSERT, UPDATE ON tenant_users TO tenantry_app;

-- A one-time sign-in link: only the SHA-256 of its token is kept. Used once, within
-- 15 minutes (the routine tenantry_use_sign_in_link checks both and marks it used).
CREATE TABLE sign_in_links (
    tenant_id   text NOT NULL,
    link_hash   bytea NOT NULL UNIQUE CHECK (octet_length(link_hash) = 32),
    user_id     uuid NOT NULL,
    created_by  text NOT NULL CHECK (length(created_by) BETWEEN 1 AND 200),
    created_at  timestamptz NOT NULL DEFAULT now(),
    expires_at  timestamptz NOT NULL,
    used_at     timestamptz,
    PRIMARY KEY (tenant_id, link_hash),
    FOREIGN KEY (tenant_id, user_id) REFERENCES tenant_users (tenant_id, user_id)
);
ALTER TABLE sign_in_links ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON sign_in_links
    USING (tenant_id = tenantry_current_tenant());
GRANT SELECT, INSERT, UPDATE ON sign_in_links TO tenantry_app;

-- A signed-in browser: the cookie holds a random id, the row its SHA-256. The form's CSRF
-- token is derived from the id (tenants/users.py), so it needs no column.
CREATE TABLE app_sessions (
    tenant_id    text NOT NULL,
    session_hash bytea NOT NULL UNIQUE CHECK (octet_length(session_hash) = 32),
    user_id      uuid NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    expires_at   timestamptz NOT NULL,
    revoked_at   timestamptz,
    PRIMARY KEY (tenant_id, session_hash),
    FOREIGN KEY (tenant_id, user_id) REFERENCES tenant_users (tenant_id, user_id)
);
CREATE INDEX app_sessions_of_user ON app_sessions (tenant_id, user_id);
ALTER TABLE app_sessions ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON app_sessions
    USING (tenant_id = tenantry_current_tenant());
GRANT SELECT, INSERT, UPDATE ON app_sessions TO tenantry_app;
