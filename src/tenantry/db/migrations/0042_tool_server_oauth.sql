-- OAuth 2.1 for tool servers (docs/decisions/0040-oauth-for-tool-servers.md): for a server
-- that answers 401 with a Bearer challenge, where its tokens come from, the platform's
-- client at its authorization server, the tokens themselves, and an authorization being
-- asked for (its state, PKCE verifier and redirect URI) until its callback comes.
--
-- Secrets here (client secret, tokens, verifier) are sealed under the tenant's data key,
-- each bound to what it is (tenantry/vault/store.py: Vault.seal): a row read without the
-- master key is no credential. Expand only: a new table; the previous release never
-- reads it. Its routine: refuse_frozen (a moving tenant's rows stay as they are).
CREATE TABLE tool_server_oauth (
    tenant_id              text NOT NULL,
    server_id              uuid NOT NULL,
    status                 text NOT NULL
        CHECK (status IN ('authorization_required', 'connected')),
    reason                 text,              -- why it needs an authorization, for people
    grant_type             text NOT NULL DEFAULT 'authorization_code'
        CHECK (grant_type IN ('authorization_code', 'client_credentials')),
    resource               text NOT NULL,     -- what tokens are for (RFC 8707)
    authorization_server   jsonb NOT NULL,    -- its metadata (tools/oauth/discovery.py)
    scope                  text,              -- what to ask for next
    step_ups               integer NOT NULL DEFAULT 0,  -- authorizations in a row for a 403
    client_id              text,              -- none yet: registered when connecting
    client_auth_method     text,
    client_secret          bytea,
    client_secret_nonce    bytea,
    access_token           bytea,
    access_token_nonce     bytea,
    access_expires_at      timestamptz,
    refresh_token          bytea,
    refresh_token_nonce    bytea,
    flow_state             text UNIQUE,       -- an authorization asked for, until its callback
    flow_verifier          bytea,
    flow_verifier_nonce    bytea,
    flow_redirect_uri      text,
    flow_expires_at        timestamptz,
    connected_at           timestamptz,
    updated_at             timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, server_id),
    FOREIGN KEY (tenant_id, server_id) REFERENCES tool_servers (tenant_id, server_id)
        ON DELETE CASCADE
);

ALTER TABLE tool_server_oauth ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON tool_server_oauth
    USING (tenant_id = tenantry_current_tenant());
GRANT SELECT, INSERT, UPDATE, DELETE ON tool_server_oauth TO tenantry_app;
