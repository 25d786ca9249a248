-- The operator console: its session epoch, and its approvals inbox by tenant.
--
-- Its functions and triggers are routines now, each the source of its latest definition
-- (src/tenantry/db/routines/, ADR 0037): console_pending_by_tenant,
-- console_pending_approvals_of.

-- The session epoch. A session cookie names the epoch it was issued in
-- (under its MAC); revoking sessions ("sign out everywhere", POST /admin/v1/sessions/revoke)
-- moves the epoch on, so every cookie issued before is refused by every API process at its
-- next request, whatever its expiry. One row, operator-wide: no tenant owns it.
CREATE TABLE console_session_epoch (
    singleton  boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    epoch      bigint NOT NULL DEFAULT 1 CHECK (epoch >= 1),
    revoked_at timestamptz
);
INSERT INTO console_session_epoch DEFAULT VALUES;
GRANT SELECT, UPDATE (epoch, revoked_at) ON console_session_epoch TO tenantry_app;
