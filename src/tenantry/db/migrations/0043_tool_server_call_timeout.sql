-- How long a call to a tool server may take, per server: a hosted tool that renders a
-- report or waits on a human-speed backend legitimately takes minutes, and one platform-wide
-- 30 s refused it. The deadline covers the whole call (pin check, retries, the answer).
-- Expand only: a column with the old behaviour as its default; the previous release never
-- reads it.
ALTER TABLE tool_servers ADD COLUMN call_timeout_seconds integer NOT NULL DEFAULT 30
    CHECK (call_timeout_seconds BETWEEN 1 AND 3600);
