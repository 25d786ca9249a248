-- name: upsert_pending
INSERT INTO tool_server_oauth (tenant_id, server_id, status, reason, grant_type, resource,
                               authorization_server, scope, client_id, client_auth_method,
                               client_secret, client_secret_nonce)
VALUES ($1, $2, 'authorization_required', $3, $4, $5, $6, $7, $8, $9, $10, $11)
ON CONFLICT (tenant_id, server_id) DO UPDATE
SET status = 'authorization_required', reason = EXCLUDED.reason,
    grant_type = EXCLUDED.grant_type, resource = EXCLUDED.resource,
    authorization_server = EXCLUDED.authorization_server, scope = EXCLUDED.scope,
    client_id = EXCLUDED.client_id, client_auth_method = EXCLUDED.client_auth_method,
    client_secret = EXCLUDED.client_secret, client_secret_nonce = EXCLUDED.client_secret_nonce,
    updated_at = now()

-- name: get
-- guarded: a server the tenant registered itself, whose OAuth documents and endpoints are
-- reached only at vetted addresses (tools/destinations.py), as the server itself is.
SELECT o.*, s.registered_by = 'tenant' AS guarded
FROM tool_server_oauth o JOIN tool_servers s USING (tenant_id, server_id)
WHERE o.tenant_id = $1 AND o.server_id = $2

-- name: get_for_update
SELECT o.*, now() AS now, s.registered_by = 'tenant' AS guarded
FROM tool_server_oauth o JOIN tool_servers s USING (tenant_id, server_id)
WHERE o.tenant_id = $1 AND o.server_id = $2
FOR UPDATE OF o

-- name: set_client
UPDATE tool_server_oauth
SET client_id = $3, client_auth_method = $4, client_secret = $5, client_secret_nonce = $6
WHERE tenant_id = $1 AND server_id = $2

-- name: start_flow
UPDATE tool_server_oauth
SET flow_state = $3, flow_verifier = $4, flow_verifier_nonce = $5, flow_redirect_uri = $6,
    flow_expires_at = now() + make_interval(secs => $7), updated_at = now()
WHERE tenant_id = $1 AND server_id = $2

-- name: take_flow
-- The authorization asked for under this state, taken once: a replayed callback finds none.
UPDATE tool_server_oauth o
SET flow_state = NULL, flow_verifier = NULL, flow_verifier_nonce = NULL,
    flow_redirect_uri = NULL, flow_expires_at = NULL, updated_at = now()
FROM (SELECT server_id, flow_verifier, flow_verifier_nonce, flow_redirect_uri,
             flow_expires_at > now() AS fresh
      FROM tool_server_oauth WHERE tenant_id = $1 AND flow_state = $2 FOR UPDATE) f
WHERE o.tenant_id = $1 AND o.server_id = f.server_id
RETURNING o.*, f.flow_verifier AS verifier, f.flow_verifier_nonce AS verifier_nonce,
          f.flow_redirect_uri AS redirect_uri, f.fresh,
          (SELECT s.registered_by = 'tenant' FROM tool_servers s
           WHERE s.tenant_id = o.tenant_id AND s.server_id = o.server_id) AS guarded

-- name: save_tokens
UPDATE tool_server_oauth
SET status = 'connected', reason = NULL, access_token = $3, access_token_nonce = $4,
    access_expires_at = CASE WHEN $5::float8 IS NULL THEN NULL
                             ELSE now() + make_interval(secs => $5) END,
    refresh_token = coalesce($6, refresh_token),
    refresh_token_nonce = CASE WHEN $6::bytea IS NULL THEN refresh_token_nonce ELSE $7 END,
    connected_at = now(), updated_at = now()
WHERE tenant_id = $1 AND server_id = $2

-- name: require
-- The server wants a new authorization (refresh refused, or a broader scope): calls stop
-- until the tenant connects it again. ``$5``: a step-up (a 403 naming scope ``$4``), which
-- counts the authorizations asked for in a row for the same scope.
UPDATE tool_server_oauth
SET status = 'authorization_required', reason = $3, scope = coalesce($4, scope),
    step_ups = CASE WHEN NOT $5 THEN 0
                    WHEN $4::text IS NOT DISTINCT FROM scope THEN step_ups + 1
                    ELSE 1 END,
    access_token = NULL, access_token_nonce = NULL, access_expires_at = NULL,
    refresh_token = CASE WHEN $5 THEN refresh_token ELSE NULL END,
    refresh_token_nonce = CASE WHEN $5 THEN refresh_token_nonce ELSE NULL END,
    updated_at = now()
WHERE tenant_id = $1 AND server_id = $2
RETURNING step_ups

-- name: connected_for_share
-- Whether the connection is connected now, under a share lock taken before the run's own
-- (runs/waiting.py): a run deciding to wait for it either sees a connection committed
-- before, or its wait is committed first and woken by the connection's change (routine
-- wake_authorized). The connecting transaction locks this row before the runs it wakes,
-- and so does the run: no deadlock.
SELECT status = 'connected' FROM tool_server_oauth WHERE tenant_id = $1 AND server_id = $2
FOR SHARE
