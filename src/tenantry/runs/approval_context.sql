-- name: approval_context
-- What an approver needs besides the call itself, read from the rows and the log that hold
-- it (nothing stored twice): the run's agent and input, what the model said in the reply
-- that asked for the call (the ModelReplied event at the seq in the call's key
-- "<run>:<reply seq>:<call index>", its whole data when the log row stands in for it), and,
-- once decided, who decided (the ApprovalDecided event names them). $3: the most characters
-- of the model's text returned.
SELECT a.approval_id, r.agent_id, g.name AS agent_name, r.input AS run_input,
       left(reply.text, $3) AS model_said, length(reply.text) > $3 AS model_said_cut,
       decided.decided_by
FROM approvals a
LEFT JOIN runs r ON r.tenant_id = a.tenant_id AND r.run_id = a.run_id
LEFT JOIN agents g ON g.tenant_id = r.tenant_id AND g.agent_id = r.agent_id
LEFT JOIN LATERAL (
    SELECT coalesce(p.data, e.data) ->> 'text' AS text
    FROM run_events e
    LEFT JOIN run_event_payloads p
      ON p.tenant_id = e.tenant_id AND p.run_id = e.run_id AND p.seq = e.seq
    WHERE e.tenant_id = a.tenant_id AND e.run_id = a.run_id AND e.type = 'ModelReplied'
      AND a.key ~ '^[^:]+:[0-9]{1,9}:[0-9]+$'
      AND e.seq = split_part(a.key, ':', 2)::integer
) reply ON true
LEFT JOIN LATERAL (
    SELECT e.data ->> 'decided_by' AS decided_by
    FROM run_events e
    WHERE e.tenant_id = a.tenant_id AND e.run_id = a.run_id AND e.type = 'ApprovalDecided'
      AND e.data ->> 'key' = a.key
    ORDER BY e.seq DESC
    LIMIT 1
) decided ON a.status <> 'pending'
WHERE a.tenant_id = $1 AND a.approval_id = ANY($2::uuid[])
