-- Activity attempts in the billing record (ADR 0016, issue 16 item 9). An attempt's fact is
-- a sandbox usage fact (0010): the same table, the same immutability and row-level
-- security, priced per sandbox second at the same `sandbox` price (0014) and counted in the
-- tenant's month spend like a built-in tool call's. Its row names the ActivityAttempted
-- event it records (seq), and adds what only an attempt has: its number, the activity's
-- name and version, and what its sandbox used as the host measured it — CPU time and the
-- peak memory charged. Tool-call facts leave these NULL; so does an attempt whose backend
-- could not measure a figure (never a made-up 0).
--
-- Its functions and triggers are routines now, each the source of its latest definition
-- (src/tenantry/db/routines/, ADR 0037): usage_per_tenant.
ALTER TABLE sandbox_usage_facts
    ADD COLUMN attempt            integer CHECK (attempt >= 1),
    ADD COLUMN activity           text,
    ADD COLUMN activity_version   integer CHECK (activity_version >= 1),
    ADD COLUMN cpu_us             bigint CHECK (cpu_us >= 0),
    ADD COLUMN peak_memory_bytes  bigint CHECK (peak_memory_bytes >= 0),
    ADD CONSTRAINT sandbox_usage_facts_activity_whole
        CHECK ((attempt IS NULL) = (activity IS NULL)
               AND (attempt IS NULL) = (activity_version IS NULL)
               AND (attempt IS NOT NULL OR (cpu_us IS NULL AND peak_memory_bytes IS NULL)));

-- The operator's per-tenant report gains the activities' part (new result columns: the
-- function is replaced, not altered; still the console role's alone, as 0019 made it).
DROP FUNCTION IF EXISTS tenantry_usage_per_tenant(timestamptz, timestamptz);
