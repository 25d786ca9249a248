-- PENDING (not a migration): what the console's search and its names beside ids want from
-- migration 0025, for whoever writes it. Until then the console does both with what exists
-- (src/tenantry/api/console/find.py): the tenants through tenantry_admin_tenants (0011,
-- granted to the console in 0019), 200 a page, at most 2,000 per search (the page says when
-- a cell has more), and one statement per tenant in that tenant's own transaction (RLS) for
-- the runs, keys and agents; names are read the same way, one statement per tenant shown.
-- With these two functions, a search is one statement and a page's names another, whatever
-- the number of tenants. Each is a definer function of the console role only (never the
-- tenant pool: not in TENANT_POOL_DEFINERS), returns only the columns the console shows, and
-- is bounded. find.py would call them in place of its loops (`search`, `names_of`).

-- A search is exact on ids and keys and a prefix on names; these make each an index read.
-- Idempotency keys are unique per tenant only (UNIQUE (tenant_id, idempotency_key)), so a
-- search across tenants needs the key first; agents' primary key is (tenant_id, agent_id).
CREATE INDEX runs_by_idempotency_key ON runs (idempotency_key)
    WHERE idempotency_key IS NOT NULL;
CREATE INDEX agents_by_id ON agents (agent_id);
-- text_pattern_ops: LIKE 'prefix%' uses the index whatever the database's collation.
CREATE INDEX agents_by_lower_name ON agents (lower(name) text_pattern_ops);
CREATE INDEX tenants_by_lower_name ON tenants (lower(name) text_pattern_ops);
CREATE INDEX tenants_by_id_pattern ON tenants (tenant_id text_pattern_ops);

-- kind: 'tenant', 'run' (an agent run), 'task' (a task or activity task), 'key' (a run by
-- its idempotency key) or 'agent'; at most p_limit (1-50) of each, ordered within a kind.
-- p_query is compared as given (the page strips it and refuses NULs, control characters and
-- more than 255 characters before it gets here); a prefix's % _ \ are literal.
CREATE FUNCTION tenantry_console_search(p_query text, p_limit integer)
RETURNS TABLE (kind text, tenant_id text, tenant_name text, id text, label text,
               agent_id uuid, agent_name text, status text, created_at timestamptz)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public AS $$
    WITH q AS (
        SELECT p_query AS exact,
               replace(replace(replace(lower(p_query), '\', '\\'), '%', '\%'), '_', '\_')
                   || '%' AS prefix,
               CASE WHEN p_query ~ '^run_[0-9a-f]{32}$' THEN substr(p_query, 5)::uuid END
                   AS run_uuid,
               CASE WHEN p_query ~ '^agt_[0-9a-f]{32}$' THEN substr(p_query, 5)::uuid END
                   AS agent_uuid,
               least(greatest(p_limit, 1), 50) AS n
    )
    (SELECT 'tenant', t.tenant_id, t.name, t.tenant_id, NULL::text, NULL::uuid, NULL::text,
            NULL::text, t.created_at
     FROM public.tenants t, q
     WHERE lower(t.name) LIKE q.prefix OR t.tenant_id LIKE q.prefix
     ORDER BY t.tenant_id LIMIT (SELECT n FROM q))
    UNION ALL
    (SELECT CASE WHEN r.kind = 'agent' THEN 'run' ELSE 'task' END, r.tenant_id, t.name,
            'run_' || replace(r.run_id::text, '-', ''), NULL, r.agent_id, a.name, r.status,
            r.created_at
     FROM q JOIN public.runs r ON r.run_id = q.run_uuid
     JOIN public.tenants t ON t.tenant_id = r.tenant_id
     LEFT JOIN public.agents a ON a.tenant_id = r.tenant_id AND a.agent_id = r.agent_id
     ORDER BY r.tenant_id LIMIT (SELECT n FROM q))
    UNION ALL
    (SELECT 'key', r.tenant_id, t.name, 'run_' || replace(r.run_id::text, '-', ''),
            r.idempotency_key, r.agent_id, a.name, r.status, r.created_at
     FROM q JOIN public.runs r ON r.idempotency_key = q.exact
     JOIN public.tenants t ON t.tenant_id = r.tenant_id
     LEFT JOIN public.agents a ON a.tenant_id = r.tenant_id AND a.agent_id = r.agent_id
     ORDER BY r.tenant_id LIMIT (SELECT n FROM q))
    UNION ALL
    (SELECT 'agent', a.tenant_id, t.name, 'agt_' || replace(a.agent_id::text, '-', ''),
            a.name, a.agent_id, a.name, NULL, a.created_at
     FROM public.agents a, q, public.tenants t
     WHERE t.tenant_id = a.tenant_id
       AND (a.agent_id = q.agent_uuid OR lower(a.name) LIKE q.prefix)
     ORDER BY a.name, a.tenant_id LIMIT (SELECT n FROM q))
$$;
REVOKE ALL ON FUNCTION tenantry_console_search(text, integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION tenantry_console_search(text, integer) TO tenantry_console;

-- The names of the tenants and agents a console page shows, in one statement: every tenant
-- of p_tenants (agent_id NULL), and each agent (p_agent_tenants[i], p_agents[i]). At most
-- 500 of each: a page shows at most 200 rows.
CREATE FUNCTION tenantry_console_names(p_tenants text[], p_agent_tenants text[],
                                       p_agents uuid[])
RETURNS TABLE (tenant_id text, agent_id uuid, name text)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public AS $$
    SELECT t.tenant_id, NULL::uuid, t.name
    FROM public.tenants t
    WHERE t.tenant_id = ANY (p_tenants[1:500])
    UNION ALL
    SELECT a.tenant_id, a.agent_id, a.name
    FROM unnest(p_agent_tenants[1:500], p_agents[1:500]) AS w(tenant_id, agent_id)
    JOIN public.agents a ON a.tenant_id = w.tenant_id AND a.agent_id = w.agent_id
$$;
REVOKE ALL ON FUNCTION tenantry_console_names(text[], text[], uuid[]) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION tenantry_console_names(text[], text[], uuid[]) TO tenantry_console;
