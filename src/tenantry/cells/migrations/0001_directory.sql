-- The global directory (ADR 0027): which cells exist, each tenant's home cell, and the
-- hashes of API keys -- only what routing a request needs. Everything else of a tenant
-- lives in its home cell.

CREATE TABLE cells (
    name           text PRIMARY KEY CHECK (name ~ '^[a-z0-9][a-z0-9_-]{0,63}$'),
    region         text NOT NULL CHECK (region ~ '^[a-z0-9][a-z0-9_-]{0,63}$'),
    -- Where the router forwards: the cell's API (its load balancer), http(s)://host[:port].
    api_url        text NOT NULL CHECK (api_url ~ '^https?://[^\s/?#]+$'),
    -- The cell's TENANTRY_OPERATOR_TOKEN: the router calls the cell's /admin/v1 with it.
    operator_token text NOT NULL CHECK (length(operator_token) BETWEEN 1 AND 512),
    -- A dedicated cell is placed only tenants that name it (a large tenant's own cell).
    dedicated      boolean NOT NULL DEFAULT false,
    created_at     timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE tenants (
    tenant_id  text PRIMARY KEY,
    region     text NOT NULL,
    home_cell  text NOT NULL REFERENCES cells (name),
    -- 'moving': the router answers 503 tenant_moving while a move copies the tenant.
    state      text NOT NULL DEFAULT 'active' CHECK (state IN ('active', 'moving')),
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX tenants_by_home_cell ON tenants (home_cell);

CREATE TABLE api_keys (
    key_hash   bytea PRIMARY KEY CHECK (length(key_hash) = 32),  -- sha256 of the key
    key_id     text NOT NULL UNIQUE,
    tenant_id  text NOT NULL REFERENCES tenants (tenant_id) ON DELETE CASCADE,
    created_at timestamptz NOT NULL DEFAULT now(),
    revoked_at timestamptz
);
CREATE INDEX api_keys_by_tenant ON api_keys (tenant_id);

-- Every change to what routing reads tells every router to drop its cached routes: a key
-- revoked, a tenant moving or switched to another cell, a cell's URL or token changed.
-- A trigger, so no writer (the router, the CLI, a move) can forget to.
CREATE FUNCTION directory_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('tenantry_directory', TG_TABLE_NAME);
    RETURN NULL;
END
$$;

CREATE TRIGGER cells_changed AFTER UPDATE OR DELETE ON cells
    FOR EACH STATEMENT EXECUTE FUNCTION directory_changed();
CREATE TRIGGER tenants_changed AFTER UPDATE OR DELETE ON tenants
    FOR EACH STATEMENT EXECUTE FUNCTION directory_changed();
CREATE TRIGGER api_keys_changed AFTER UPDATE OR DELETE ON api_keys
    FOR EACH STATEMENT EXECUTE FUNCTION directory_changed();
