-- Tenants register their own tool servers (issue 39, POST /v1/tool-servers): who registered
-- each one, because a tenant's server is held to the operator's rules for where it may be
-- (tools/destinations.py) at every connection, and an operator's is not. Expand only: a
-- column whose default is what every existing row is.
ALTER TABLE tool_servers ADD COLUMN registered_by text NOT NULL DEFAULT 'operator'
    CHECK (registered_by IN ('operator', 'tenant'));

-- Tool servers and secrets are removed through the API now (by the tenant or the operator).
GRANT DELETE ON tool_servers, secrets TO tenantry_app;
