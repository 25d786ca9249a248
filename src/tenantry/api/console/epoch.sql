-- The console's session epoch (migration 0017): one operator-wide row.

-- name: session_epoch
SELECT epoch FROM console_session_epoch WHERE singleton

-- name: revoke_sessions
UPDATE console_session_epoch SET epoch = epoch + 1, revoked_at = now()
WHERE singleton
RETURNING epoch
