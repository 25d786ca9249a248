-- Operators are people too (issue 41 part 7, ADR 0043 §8): the operator's people, each with
-- a role (read-only, support, admin), signing in to the operator console by one-time link or
-- by the OpenID Connect provider tenants' people use. The operator token stays, for
-- bootstrap and automation. Expand only: two new tables the previous release never reads.
--
-- Platform-wide, not a tenant's: no tenant column and no row-level security. Only the
-- console role (the operator console's own pool, ADR 0011) may read and write them; the
-- tenant pool's role may not, so no tenant request can reach an operator's row.

CREATE TABLE operator_users (
    user_id      uuid PRIMARY KEY,  -- UUIDv7, shown as opr_<32 hex>
    email        text NOT NULL CHECK (length(email) BETWEEN 3 AND 254),
    role         text NOT NULL CHECK (role IN ('read-only', 'support', 'admin')),
    created_by   text NOT NULL CHECK (length(created_by) BETWEEN 1 AND 200),
    created_at   timestamptz NOT NULL DEFAULT now(),
    disabled_at  timestamptz,
    -- Bound at the first sign-in by OpenID Connect (as tenant_users', migration 0054).
    oidc_issuer  text CHECK (length(oidc_issuer) BETWEEN 1 AND 2048),
    oidc_subject text CHECK (length(oidc_subject) BETWEEN 1 AND 255),
    CHECK ((oidc_issuer IS NULL) = (oidc_subject IS NULL))
);
CREATE UNIQUE INDEX operator_users_email ON operator_users (lower(email));
REVOKE ALL ON operator_users FROM PUBLIC;
GRANT SELECT, INSERT, UPDATE ON operator_users TO tenantry_console;

-- A one-time sign-in link: only the SHA-256 of its token is kept; used once, within 15
-- minutes. Its use is one UPDATE … RETURNING (never two requests using one link).
CREATE TABLE operator_sign_in_links (
    link_hash  bytea PRIMARY KEY CHECK (octet_length(link_hash) = 32),
    user_id    uuid NOT NULL REFERENCES operator_users (user_id),
    created_by text NOT NULL CHECK (length(created_by) BETWEEN 1 AND 200),
    created_at timestamptz NOT NULL DEFAULT now(),
    expires_at timestamptz NOT NULL,
    used_at    timestamptz
);
CREATE INDEX operator_sign_in_links_of_user ON operator_sign_in_links (user_id);
REVOKE ALL ON operator_sign_in_links FROM PUBLIC;
GRANT SELECT, INSERT, UPDATE ON operator_sign_in_links TO tenantry_console;
