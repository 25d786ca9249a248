-- Which MCP protocol generation a tool server spoke when last listed (registration,
-- re-pin): true the modern one (server/discover), false the 2025 handshake, NULL not known
-- (registered before this). A worker's first session to a handshake server then starts
-- with `initialize`, as the 2025 lifecycle requires, instead of probing server/discover
-- (ADR 0039). Expand only: a nullable column.
ALTER TABLE tool_servers ADD COLUMN speaks_modern boolean;
