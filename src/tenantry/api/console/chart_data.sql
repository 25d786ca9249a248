-- The charts page's reads (chart_data.py), each in one tenant's own transaction: row-level
-- security checks them as it does every tenant read, and no console function is needed.

-- name: runs_last_hour
-- Every agent run that started or ended since $2. A run that started then is either still
-- not ended or ended since, so the two halves find them all; the second half uses the
-- retention candidates' index (tenant, coalesce(finished_at, updated_at)).
(SELECT created_at, started_at, NULL::timestamptz AS ended_at
 FROM runs
 WHERE tenant_id = $1 AND kind = 'agent' AND status IN ('queued', 'running', 'waiting')
   AND started_at >= $2)
UNION ALL
(SELECT created_at, started_at, coalesce(finished_at, updated_at) AS ended_at
 FROM runs
 WHERE tenant_id = $1 AND kind = 'agent' AND status IN ('finished', 'failed', 'cancelled')
   AND coalesce(finished_at, updated_at) >= $2)
LIMIT $3

-- name: calls_by_account
-- Model calls that answered (one usage fact each) since $2, per provider account.
SELECT account, count(*) AS calls
FROM usage_facts
WHERE tenant_id = $1 AND created_at >= $2
GROUP BY account ORDER BY account
