-- The operator token, rotatable live (issue 41 part 7, ADR 0043 §9): the tokens that open
-- /admin/v1 and the console's login are the rows here, each kept only as its SHA-256. The
-- configured token (TENANTRY_OPERATOR_TOKEN, or the data dir's file) is a row from the first
-- start of a process that has it; a rotation adds the new one and gives the others an end
-- (the overlap), so no process restarts. Expand only: one new table the previous release
-- never reads (it keeps comparing with its configured token).

CREATE TABLE operator_tokens (
    token_hash bytea PRIMARY KEY CHECK (octet_length(token_hash) = 32),
    created_by text NOT NULL CHECK (length(created_by) BETWEEN 1 AND 200),
    created_at timestamptz NOT NULL DEFAULT now(),
    expires_at timestamptz  -- NULL: until a rotation gives it an end
);
-- Nobody's but the definer functions' (routines operator_token_*.sql).
REVOKE ALL ON operator_tokens FROM PUBLIC;
