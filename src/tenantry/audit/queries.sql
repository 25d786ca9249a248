-- name: insert_change
INSERT INTO account_changes (tenant_id, change_id, actor, action, target, status)
VALUES ($1, $2, $3, $4, $5, $6)

-- name: trail_page
-- Both halves of the trail, newest first, after the cursor ($2, $3: the last entry's time
-- and id): each half is read in index order and cut at the limit, then the two are merged.
-- $5: only one kind ('tool_call' or 'change'); $6: one run's tool calls; $7: one actor's
-- changes; $8: nothing before this time.
SELECT * FROM (
    (SELECT 'tool_call'::text AS kind, a.audit_id AS id, a.created_at,
            NULL::text AS actor, NULL::text AS action, NULL::text AS target,
            NULL::smallint AS status, a.run_id, a.tool, a.server, a.key,
            a.arguments_sha256, a.outcome, a.detail, a.duration_ms
     FROM audit_log a
     WHERE a.tenant_id = $1 AND ($5::text IS NULL OR $5 = 'tool_call')
       AND ($6::uuid IS NULL OR a.run_id = $6) AND $7::text IS NULL
       AND ($2::timestamptz IS NULL OR (a.created_at, a.audit_id) < ($2, $3::uuid))
       AND ($8::timestamptz IS NULL OR a.created_at >= $8)
     ORDER BY a.created_at DESC, a.audit_id DESC
     LIMIT $4)
    UNION ALL
    (SELECT 'change', c.change_id, c.created_at, c.actor, c.action, c.target, c.status,
            NULL::uuid, NULL, NULL, NULL, NULL, NULL, NULL, NULL
     FROM account_changes c
     WHERE c.tenant_id = $1 AND ($5::text IS NULL OR $5 = 'change')
       AND $6::uuid IS NULL AND ($7::text IS NULL OR c.actor = $7)
       AND ($2::timestamptz IS NULL OR (c.created_at, c.change_id) < ($2, $3::uuid))
       AND ($8::timestamptz IS NULL OR c.created_at >= $8)
     ORDER BY c.created_at DESC, c.change_id DESC
     LIMIT $4)
) trail
ORDER BY created_at DESC, id DESC
LIMIT $4
