-- A run whose tool server's OAuth authorization lapsed waits instead of failing (issue 39,
-- ADR 0040): status 'waiting', slot released, the call not made, until the tenant connects
-- the server again; the connection's status change wakes it (routine wake_authorized).
-- Expand only: one nullable column and an index; nothing the previous release reads.

-- 1. The tool server (its id) whose connection a waiting run waits for; NULL otherwise.
ALTER TABLE runs ADD COLUMN waiting_tool_server uuid;
-- Small: only the runs waiting for a connection (the wake reads it per server).
CREATE INDEX runs_waiting_for_tool_server ON runs (tenant_id, waiting_tool_server)
    WHERE status = 'waiting' AND waiting_tool_server IS NOT NULL;
