-- Retention (issue 17, DESIGN §11b, ADR 0017): terminal runs and tasks leave on schedule or
-- on request; an immutable tombstone says what was there; billing and audit stay.
--
-- Only the functions below delete operational rows. The application role has no DELETE
-- privilege on any of these tables, and the immutability triggers of the event log stop
-- everyone else — the owner included — unless the deleting function says, for the
-- length of its own call, that a retention batch is under way.

-- 1. Usage facts and sandbox usage facts outlive the event they record: they name the
--    run and seq as values (what billing needs), never as a foreign key into the log.
ALTER TABLE usage_facts DROP CONSTRAINT usage_facts_tenant_id_run_id_seq_fkey;
ALTER TABLE sandbox_usage_facts DROP CONSTRAINT sandbox_usage_facts_tenant_id_run_id_seq_fkey;

-- 2. The operator's policy. No row: the defaults (retention/policy.py holds them, the
--    API shows them): runs kept 30 days, tombstones and audit kept forever, blobs follow
--    their run.
CREATE TABLE retention_policies (
    tenant_id          text PRIMARY KEY REFERENCES tenants (tenant_id),
    runs_days          integer NOT NULL CHECK (runs_days BETWEEN 0 AND 36500),
    tombstones_days    integer CHECK (tombstones_days BETWEEN 0 AND 36500),  -- NULL: forever
    audit_days         integer CHECK (audit_days BETWEEN 0 AND 36500),       -- NULL: forever
    blobs_follow_runs  boolean NOT NULL DEFAULT true,
    updated_at         timestamptz NOT NULL DEFAULT now()
);
ALTER TABLE retention_policies ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON retention_policies
    USING (tenant_id = tenantry_current_tenant());
GRANT SELECT, INSERT, UPDATE ON retention_policies TO tenantry_app;

-- 3. What remains of a deleted run (ADR 0017): who, what, when, how much — never its
--    input, answer, events or the idempotency key itself (only its digest, so a key is
--    not reusable while its tombstone lives).
CREATE TABLE tombstones (
    tenant_id               text NOT NULL REFERENCES tenants (tenant_id),
    run_id                  uuid NOT NULL,
    kind                    text NOT NULL,
    agent_id                uuid NOT NULL,
    agent_version           integer NOT NULL,
    parent_run_id           uuid,
    status                  text NOT NULL CHECK (status IN
                                ('finished', 'failed', 'cancelled', 'dead_lettered')),
    created_at              timestamptz NOT NULL,
    started_at              timestamptz,
    ended_at                timestamptz NOT NULL,
    steps                   integer NOT NULL,
    events                  integer NOT NULL,
    input_tokens            bigint NOT NULL,
    output_tokens           bigint NOT NULL,
    cost_micros             bigint NOT NULL,
    idempotency_key_sha256  bytea,
    reason                  text NOT NULL CHECK (reason IN ('retention', 'request', 'erase')),
    deleted_at              timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, run_id)
);
CREATE UNIQUE INDEX tombstones_by_idempotency_key
    ON tombstones (tenant_id, idempotency_key_sha256)
    WHERE idempotency_key_sha256 IS NOT NULL;
CREATE INDEX tombstones_by_age ON tombstones (tenant_id, deleted_at);
ALTER TABLE tombstones ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON tombstones
    USING (tenant_id = tenantry_current_tenant());
GRANT SELECT ON tombstones TO tenantry_app;

-- Set only for the length of a call of the functions below (their SET clause); the
-- application role could set it too, but it holds no DELETE privilege for it to matter.
CREATE FUNCTION tenantry_retention_under_way() RETURNS boolean
LANGUAGE sql STABLE AS $$
    SELECT coalesce(current_setting('tenantry.retention', true), '') = 'on'
$$;

-- Immutable except for the retention functions' deletes: an UPDATE is always refused.
CREATE FUNCTION tenantry_refuse_change_but_retention() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' AND tenantry_retention_under_way() THEN
        RETURN OLD;
    END IF;
    RAISE EXCEPTION '% rows are immutable', TG_TABLE_NAME
        USING ERRCODE = 'restrict_violation';
END
$$;
DROP TRIGGER run_events_immutable ON run_events;
CREATE TRIGGER run_events_immutable BEFORE UPDATE OR DELETE ON run_events
    FOR EACH ROW EXECUTE FUNCTION tenantry_refuse_change_but_retention();
CREATE TRIGGER tombstones_immutable BEFORE UPDATE OR DELETE ON tombstones
    FOR EACH ROW EXECUTE FUNCTION tenantry_refuse_change_but_retention();
DROP TRIGGER audit_log_append_only ON audit_log;
CREATE TRIGGER audit_log_append_only BEFORE UPDATE OR DELETE ON audit_log
    FOR EACH ROW EXECUTE FUNCTION tenantry_refuse_change_but_retention();

-- 4. One cleaner per tenant at a time: the lease's epoch fences every batch.
CREATE TABLE cleanup_leases (
    tenant_id       text PRIMARY KEY REFERENCES tenants (tenant_id),
    owner           text,
    epoch           bigint NOT NULL DEFAULT 0,
    expires_at      timestamptz,
    last_pass_at    timestamptz,
    last_deleted    bigint NOT NULL DEFAULT 0,
    -- Runs deleted (each left one tombstone) and tombstones expired, ever, kept in the
    -- transactions that do either: their difference is the tenant's tombstones, which
    -- /metrics reads without counting a table that grows for as long as tombstones live.
    deleted_total   bigint NOT NULL DEFAULT 0,
    tombstones_expired bigint NOT NULL DEFAULT 0
);
ALTER TABLE cleanup_leases ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON cleanup_leases
    USING (tenant_id = tenantry_current_tenant());

-- 5. Blobs of deleted runs, deleted after the batch commits (the blob store is not in
--    the transaction): a crash leaves a row here, never a blob without its run's row
--    gone or a run pointing at a deleted blob. Carried out idempotently, retried.
CREATE TABLE blob_deletions (
    tenant_id     text NOT NULL REFERENCES tenants (tenant_id),
    ref           text NOT NULL,
    run_id        uuid NOT NULL,
    queued_at     timestamptz NOT NULL DEFAULT now(),
    attempts      integer NOT NULL DEFAULT 0,
    next_at       timestamptz NOT NULL DEFAULT now(),
    last_error    text,
    PRIMARY KEY (tenant_id, ref)
);
CREATE INDEX blob_deletions_due ON blob_deletions (next_at);
ALTER TABLE blob_deletions ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON blob_deletions
    USING (tenant_id = tenantry_current_tenant());

-- 6. Erasure on request: a job with counts, shown while it runs.
CREATE TABLE erase_jobs (
    job_id          uuid PRIMARY KEY,
    tenant_id       text NOT NULL REFERENCES tenants (tenant_id),
    status          text NOT NULL DEFAULT 'running' CHECK (status IN ('running', 'done')),
    runs_total      bigint NOT NULL DEFAULT 0,
    runs_deleted    bigint NOT NULL DEFAULT 0,
    runs_cancelled  bigint NOT NULL DEFAULT 0,
    secrets_deleted integer NOT NULL DEFAULT 0,
    tool_servers_deleted integer NOT NULL DEFAULT 0,
    blobs_queued    bigint NOT NULL DEFAULT 0,
    requested_by    text NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT now(),
    finished_at     timestamptz
);
ALTER TABLE erase_jobs ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON erase_jobs
    USING (tenant_id = tenantry_current_tenant());
GRANT SELECT, INSERT, UPDATE ON erase_jobs TO tenantry_app;
CREATE INDEX erase_jobs_by_tenant ON erase_jobs (tenant_id, created_at);
CREATE UNIQUE INDEX erase_jobs_one_running ON erase_jobs (tenant_id) WHERE status = 'running';

-- A tenant being erased admits nothing new (the API reads this flag).
ALTER TABLE tenants ADD COLUMN erased_at timestamptz;
GRANT UPDATE (erased_at) ON tenants TO tenantry_app;

-- Erasure's crypto-shredding: the tenant's sealed secrets, its data key (without which
-- any copy of them, in a backup too, opens for nobody) and its tool servers. Returns how
-- many secrets and tool servers went.
CREATE FUNCTION tenantry_erase_tenant_state(p_tenant text)
RETURNS TABLE (secrets integer, tool_servers integer)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public AS $$
DECLARE
    v_secrets integer;
    v_servers integer;
BEGIN
    DELETE FROM public.secrets s WHERE s.tenant_id = p_tenant;
    GET DIAGNOSTICS v_secrets = ROW_COUNT;
    DELETE FROM public.tenant_keys k WHERE k.tenant_id = p_tenant;
    DELETE FROM public.tool_servers s WHERE s.tenant_id = p_tenant;
    GET DIAGNOSTICS v_servers = ROW_COUNT;
    UPDATE public.api_keys SET revoked_at = coalesce(revoked_at, now())
    WHERE tenant_id = p_tenant;
    RETURN QUERY SELECT v_secrets, v_servers;
END
$$;

-- Candidates of one tenant, oldest end first (coalesce: a dead letter has no finished_at).
CREATE INDEX runs_retention_candidates ON runs (tenant_id, (coalesce(finished_at, updated_at)))
    WHERE status IN ('finished', 'failed', 'cancelled')
       OR (status = 'waiting' AND (error->>'dead_lettered') = 'true');
-- A parent's children (a parent is kept while a child lives).
CREATE INDEX runs_by_parent ON runs (tenant_id, parent_run_id) WHERE parent_run_id IS NOT NULL;

-- 7. A deleted row leaves the live counts (tenant_load) as its status change would have:
--    a dead letter is a waiting task until it is deleted.
CREATE FUNCTION tenantry_uncount_deleted_run() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public AS $$
BEGIN
    UPDATE public.tenant_load SET
        queued  = queued  - (OLD.status = 'queued')::int,
        running = running - (OLD.status = 'running')::int,
        waiting = waiting - (OLD.status = 'waiting')::int
    WHERE tenant_id = OLD.tenant_id AND OLD.status IN ('queued', 'running', 'waiting');
    RETURN NULL;
END
$$;
-- (WHEN: an ended run, all that retention deletes, costs no call at all.)
CREATE TRIGGER runs_uncount_deleted AFTER DELETE ON runs
    FOR EACH ROW WHEN (OLD.status IN ('queued', 'running', 'waiting'))
    EXECUTE FUNCTION tenantry_uncount_deleted_run();
-- The ended-run totals of /metrics (migration 0008) lose a deleted run too; a retention
-- batch takes its runs off them in one statement per status (tenantry_retention_batch),
-- not one UPDATE of the same hot row per run — 500 row versions, and a lock on the row
-- the tenant's finishing runs need, held for the whole batch.
DROP TRIGGER runs_count_ended ON runs;
CREATE TRIGGER runs_count_ended AFTER UPDATE OF status ON runs
    FOR EACH ROW EXECUTE FUNCTION tenantry_count_ended_runs();
CREATE TRIGGER runs_count_ended_deleted AFTER DELETE ON runs
    FOR EACH ROW WHEN (OLD.status IN ('finished', 'failed', 'cancelled')
                       AND NOT tenantry_retention_under_way())
    EXECUTE FUNCTION tenantry_count_ended_runs();

-- 8. The cleanup lease: taken when free or expired (or already ours), the epoch bumped on
--    every take. Returns the epoch, or NULL when another cleaner holds the tenant.
CREATE FUNCTION tenantry_take_cleanup_lease(p_tenant text, p_owner text, p_seconds double precision)
RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public AS $$
DECLARE
    v_epoch bigint;
BEGIN
    INSERT INTO public.cleanup_leases AS l (tenant_id, owner, epoch, expires_at)
    VALUES (p_tenant, p_owner, 1, clock_timestamp() + make_interval(secs => p_seconds))
    ON CONFLICT (tenant_id) DO UPDATE
        SET owner = p_owner, epoch = l.epoch + 1,
            expires_at = clock_timestamp() + make_interval(secs => p_seconds)
        WHERE l.owner IS NULL OR l.expires_at IS NULL OR l.expires_at < clock_timestamp()
           OR l.owner = p_owner
    RETURNING l.epoch INTO v_epoch;
    RETURN v_epoch;
END
$$;

-- The tenants whose turn it is: every tenant whose lease is free, least recently cleaned
-- first. A pass over a tenant with nothing to delete is one index probe.
CREATE FUNCTION tenantry_cleanup_due(p_every_seconds double precision, p_limit integer)
RETURNS TABLE (tenant_id text)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public AS $$
    SELECT t.tenant_id FROM public.tenants t
    LEFT JOIN public.cleanup_leases l ON l.tenant_id = t.tenant_id
    WHERE (l.expires_at IS NULL OR l.expires_at < clock_timestamp())
      AND (l.last_pass_at IS NULL
           OR l.last_pass_at < clock_timestamp() - make_interval(secs => p_every_seconds)
           OR t.erased_at IS NOT NULL)
    ORDER BY l.last_pass_at NULLS FIRST, t.tenant_id
    LIMIT p_limit
$$;

-- Renew (or end, p_seconds NULL) a lease we hold; false when it is no longer ours.
CREATE FUNCTION tenantry_keep_cleanup_lease(p_tenant text, p_owner text, p_epoch bigint,
                                            p_seconds double precision, p_deleted bigint)
RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public AS $$
BEGIN
    UPDATE public.cleanup_leases SET
        expires_at = CASE WHEN p_seconds IS NULL THEN NULL
                          ELSE clock_timestamp() + make_interval(secs => p_seconds) END,
        owner = CASE WHEN p_seconds IS NULL THEN NULL ELSE owner END,
        last_pass_at = CASE WHEN p_seconds IS NULL THEN clock_timestamp() ELSE last_pass_at END,
        last_deleted = CASE WHEN p_seconds IS NULL THEN p_deleted ELSE last_deleted END
    WHERE tenant_id = p_tenant AND owner = p_owner AND epoch = p_epoch
      AND expires_at >= clock_timestamp();
    RETURN FOUND;
END
$$;

-- 9. One batch, one transaction, all or nothing (ADR 0017). The caller runs it as a
--    single statement, so its fence is checked by the server at the batch's start and
--    again at its end (clock time): a cleaner paused past its lease writes nothing, and a
--    new holder's take waits on the lease row until a batch in flight has committed.
--    p_run: one run only (DELETE /v1/runs/{id}); p_cutoff: runs that ended before it.
CREATE FUNCTION tenantry_retention_batch(
    p_tenant text, p_owner text, p_epoch bigint, p_cutoff timestamptz, p_limit integer,
    p_reason text, p_run uuid DEFAULT NULL, p_blobs boolean DEFAULT true)
RETURNS TABLE (runs integer, events bigint, blobs integer)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public
-- The exemption of the immutability triggers, for this call only (a SET clause ends with
-- the call, even an aborted one; a set_config would last the caller's whole transaction).
SET tenantry.retention = 'on' AS $$
DECLARE
    v_runs uuid[];
    v_statuses text[];
    v_events bigint;
    v_blobs integer := 0;
BEGIN
    -- One run on request (p_run, no epoch) needs no lease: it is no stale cleaner, and
    -- the run's row lock keeps it and a cleaner from deleting the same run twice.
    IF p_epoch IS NOT NULL OR p_run IS NULL THEN
        PERFORM 1 FROM public.cleanup_leases l
        WHERE l.tenant_id = p_tenant AND l.owner = p_owner AND l.epoch = p_epoch
          AND l.expires_at > clock_timestamp()
        FOR UPDATE;
        IF NOT FOUND THEN
            RAISE EXCEPTION 'cleanup lease of tenant % epoch % is no longer held',
                p_tenant, p_epoch USING ERRCODE = 'TR001';
        END IF;
    END IF;

    SELECT array_agg(c.run_id), array_agg(c.status) INTO v_runs, v_statuses FROM (
        SELECT r.run_id, r.status FROM public.runs r
        WHERE r.tenant_id = p_tenant
          AND (p_run IS NULL OR r.run_id = p_run)
          AND (r.status IN ('finished', 'failed', 'cancelled')
               OR (r.status = 'waiting' AND (r.error->>'dead_lettered') = 'true'))
          AND coalesce(r.finished_at, r.updated_at) < p_cutoff
          AND (r.webhook_state IS DISTINCT FROM 'pending')
          AND NOT EXISTS (
              SELECT 1 FROM public.runs c
              WHERE c.tenant_id = r.tenant_id AND c.parent_run_id = r.run_id
                AND NOT (c.status IN ('finished', 'failed', 'cancelled')
                         OR (c.status = 'waiting' AND (c.error->>'dead_lettered') = 'true')))
          AND NOT EXISTS (
              SELECT 1 FROM public.approvals a
              WHERE a.tenant_id = r.tenant_id AND a.run_id = r.run_id AND a.status = 'pending')
        ORDER BY coalesce(r.finished_at, r.updated_at)
        LIMIT p_limit
        FOR UPDATE OF r SKIP LOCKED
    ) c;
    IF v_runs IS NULL THEN
        RETURN QUERY SELECT 0, 0::bigint, 0;
        RETURN;
    END IF;

    INSERT INTO public.tombstones (
        tenant_id, run_id, kind, agent_id, agent_version, parent_run_id, status,
        created_at, started_at, ended_at, steps, events, input_tokens, output_tokens,
        cost_micros, idempotency_key_sha256, reason)
    SELECT r.tenant_id, r.run_id, r.kind, r.agent_id, r.agent_version, r.parent_run_id,
           CASE WHEN r.status = 'waiting' THEN 'dead_lettered' ELSE r.status END,
           r.created_at, r.started_at, coalesce(r.finished_at, r.updated_at), r.steps,
           r.last_seq, r.input_tokens, r.output_tokens, r.cost_micros,
           CASE WHEN r.idempotency_key IS NULL THEN NULL
                ELSE sha256(convert_to(r.idempotency_key, 'UTF8')) END,
           p_reason
    FROM public.runs r WHERE r.tenant_id = p_tenant AND r.run_id = ANY (v_runs);

    IF p_blobs THEN
        INSERT INTO public.blob_deletions (tenant_id, ref, run_id)
        SELECT DISTINCT ON (b.ref) p_tenant, b.ref, b.run_id FROM (
            SELECT e.run_id, e.data->>'output_ref' AS ref FROM public.run_events e
            WHERE e.tenant_id = p_tenant AND e.run_id = ANY (v_runs)
              AND e.type = 'ToolCompleted' AND e.data ? 'output_ref'
            UNION ALL
            SELECT e.run_id, e.data->>'ref' FROM public.run_events e
            WHERE e.tenant_id = p_tenant AND e.run_id = ANY (v_runs)
              AND e.type = 'SandboxSaved'
        ) b WHERE b.ref IS NOT NULL
        ON CONFLICT (tenant_id, ref) DO NOTHING;
        GET DIAGNOSTICS v_blobs = ROW_COUNT;
    END IF;

    DELETE FROM public.run_event_payloads p
    WHERE p.tenant_id = p_tenant AND p.run_id = ANY (v_runs);
    DELETE FROM public.run_events e WHERE e.tenant_id = p_tenant AND e.run_id = ANY (v_runs);
    GET DIAGNOSTICS v_events = ROW_COUNT;
    DELETE FROM public.approvals a WHERE a.tenant_id = p_tenant AND a.run_id = ANY (v_runs);
    DELETE FROM public.budget_reservations b
    WHERE b.tenant_id = p_tenant AND b.run_id = ANY (v_runs);
    DELETE FROM public.runs r WHERE r.tenant_id = p_tenant AND r.run_id = ANY (v_runs);
    -- What runs_count_ended_deleted leaves to us (see there); last, so that the totals'
    -- row locks are held only to the commit.
    UPDATE public.run_status_totals t SET runs = t.runs - d.n
    FROM (SELECT x.status, count(*) AS n FROM unnest(v_statuses) AS x (status)
          WHERE x.status IN ('finished', 'failed', 'cancelled') GROUP BY x.status) d
    WHERE t.tenant_id = p_tenant AND t.status = d.status;

    -- The end of the batch: still ours by the clock? (A batch that outlived its lease
    -- rolls back; the next holder does it again.)
    PERFORM 1 FROM public.cleanup_leases l
    WHERE l.tenant_id = p_tenant AND l.epoch = p_epoch AND l.expires_at > clock_timestamp();
    IF NOT FOUND AND p_epoch IS NOT NULL THEN
        RAISE EXCEPTION 'cleanup lease of tenant % epoch % expired during the batch',
            p_tenant, p_epoch USING ERRCODE = 'TR001';
    END IF;
    INSERT INTO public.cleanup_leases AS l (tenant_id, deleted_total)
    VALUES (p_tenant, cardinality(v_runs))
    ON CONFLICT (tenant_id) DO UPDATE SET deleted_total = l.deleted_total + cardinality(v_runs);
    RETURN QUERY SELECT cardinality(v_runs), v_events, v_blobs;
END
$$;

-- Tombstones and audit rows past their own policies (NULL days: kept forever), in
-- bounded batches under the same fence. Deleting audit evidence is itself recorded by
-- the caller (an audit row of its own, outcome `audit_expired`).
CREATE FUNCTION tenantry_retention_expire(
    p_tenant text, p_owner text, p_epoch bigint, p_tombstones_before timestamptz,
    p_audit_before timestamptz, p_limit integer)
RETURNS TABLE (tombstones integer, audit integer)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public
SET tenantry.retention = 'on' AS $$
DECLARE
    v_tombstones integer := 0;
    v_audit integer := 0;
BEGIN
    PERFORM 1 FROM public.cleanup_leases l
    WHERE l.tenant_id = p_tenant AND l.owner = p_owner AND l.epoch = p_epoch
      AND l.expires_at > clock_timestamp()
    FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'cleanup lease of tenant % epoch % is no longer held', p_tenant, p_epoch
            USING ERRCODE = 'TR001';
    END IF;
    IF p_tombstones_before IS NOT NULL THEN
        DELETE FROM public.tombstones t WHERE (t.tenant_id, t.run_id) IN (
            SELECT x.tenant_id, x.run_id FROM public.tombstones x
            WHERE x.tenant_id = p_tenant AND x.deleted_at < p_tombstones_before
            LIMIT p_limit);
        GET DIAGNOSTICS v_tombstones = ROW_COUNT;
        UPDATE public.cleanup_leases l
        SET tombstones_expired = l.tombstones_expired + v_tombstones
        WHERE l.tenant_id = p_tenant AND v_tombstones > 0;
    END IF;
    IF p_audit_before IS NOT NULL THEN
        DELETE FROM public.audit_log a WHERE (a.tenant_id, a.audit_id) IN (
            SELECT x.tenant_id, x.audit_id FROM public.audit_log x
            WHERE x.tenant_id = p_tenant AND x.created_at < p_audit_before
              AND x.outcome <> 'audit_expired'
            LIMIT p_limit);
        GET DIAGNOSTICS v_audit = ROW_COUNT;
    END IF;
    RETURN QUERY SELECT v_tombstones, v_audit;
END
$$;

-- Blob deletions due, claimed for a while (a crashed deleter's rows come back).
CREATE FUNCTION tenantry_claim_blob_deletions(p_limit integer, p_seconds double precision)
RETURNS TABLE (tenant_id text, ref text)
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, public AS $$
    UPDATE public.blob_deletions d
    SET attempts = d.attempts + 1,
        next_at = clock_timestamp() + make_interval(secs => p_seconds)
    FROM (SELECT x.tenant_id, x.ref FROM public.blob_deletions x
          WHERE x.next_at <= clock_timestamp()
          ORDER BY x.next_at LIMIT p_limit FOR UPDATE SKIP LOCKED) due
    WHERE d.tenant_id = due.tenant_id AND d.ref = due.ref
    RETURNING d.tenant_id, d.ref
$$;

CREATE FUNCTION tenantry_blob_deleted(p_tenant text, p_ref text, p_error text)
RETURNS void
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, public AS $$
    DELETE FROM public.blob_deletions WHERE tenant_id = p_tenant AND ref = p_ref
      AND p_error IS NULL;
    UPDATE public.blob_deletions SET last_error = p_error
    WHERE tenant_id = p_tenant AND ref = p_ref AND p_error IS NOT NULL;
$$;

-- Gauges for /metrics, by tenant class (never by tenant id): candidates waiting (ended
-- before the tenant's cutoff), tombstones, blobs waiting to be deleted, the cleanup lag
-- (the age of the oldest candidate past its cutoff), runs deleted ever and by each
-- tenant's last pass. Tombstones come from the lease row's counters, not count(*): kept
-- forever by default, they outgrow anything a scrape may read.
CREATE FUNCTION tenantry_retention_gauges(p_default_days integer)
RETURNS TABLE (tenant_class text, candidates bigint, tombstones bigint,
               blob_deletions bigint, lag_seconds double precision, deleted_total bigint,
               last_deleted bigint)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public AS $$
    SELECT t.plan, sum(d.n)::bigint,
           coalesce(sum(l.deleted_total - l.tombstones_expired), 0)::bigint, sum(b.n)::bigint,
           coalesce(max(extract(epoch FROM d.cutoff - d.oldest)), 0)::double precision,
           coalesce(sum(l.deleted_total), 0)::bigint, coalesce(sum(l.last_deleted), 0)::bigint
    FROM public.tenants t
    LEFT JOIN public.retention_policies p ON p.tenant_id = t.tenant_id
    LEFT JOIN public.cleanup_leases l ON l.tenant_id = t.tenant_id
    -- The predicate is the candidates index's, so each tenant's count is a range scan.
    CROSS JOIN LATERAL (
        SELECT count(*) AS n, min(coalesce(r.finished_at, r.updated_at)) AS oldest,
               now() - make_interval(days => coalesce(p.runs_days, p_default_days)) AS cutoff
        FROM public.runs r
        WHERE r.tenant_id = t.tenant_id
          AND (r.status IN ('finished', 'failed', 'cancelled')
               OR (r.status = 'waiting' AND (r.error->>'dead_lettered') = 'true'))
          AND coalesce(r.finished_at, r.updated_at)
              < now() - make_interval(days => coalesce(p.runs_days, p_default_days))
    ) d
    CROSS JOIN LATERAL (SELECT count(*) AS n FROM public.blob_deletions x
                        WHERE x.tenant_id = t.tenant_id) b
    GROUP BY t.plan ORDER BY t.plan
$$;

REVOKE ALL ON FUNCTION tenantry_take_cleanup_lease(text, text, double precision) FROM PUBLIC;
REVOKE ALL ON FUNCTION tenantry_cleanup_due(double precision, integer) FROM PUBLIC;
REVOKE ALL ON FUNCTION tenantry_keep_cleanup_lease(text, text, bigint, double precision, bigint)
    FROM PUBLIC;
REVOKE ALL ON FUNCTION tenantry_retention_batch(text, text, bigint, timestamptz, integer, text,
                                                uuid, boolean) FROM PUBLIC;
REVOKE ALL ON FUNCTION tenantry_retention_expire(text, text, bigint, timestamptz, timestamptz,
                                                 integer) FROM PUBLIC;
REVOKE ALL ON FUNCTION tenantry_claim_blob_deletions(integer, double precision) FROM PUBLIC;
REVOKE ALL ON FUNCTION tenantry_blob_deleted(text, text, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION tenantry_retention_gauges(integer) FROM PUBLIC;
REVOKE ALL ON FUNCTION tenantry_erase_tenant_state(text) FROM PUBLIC;
-- The operator's act: the console's role alone (ADR 0011), never the tenant API's pool.
GRANT EXECUTE ON FUNCTION tenantry_erase_tenant_state(text) TO tenantry_console;
GRANT EXECUTE ON FUNCTION tenantry_take_cleanup_lease(text, text, double precision)
    TO tenantry_app;
GRANT EXECUTE ON FUNCTION tenantry_cleanup_due(double precision, integer) TO tenantry_app;
GRANT EXECUTE ON FUNCTION tenantry_keep_cleanup_lease(text, text, bigint, double precision,
                                                      bigint) TO tenantry_app;
GRANT EXECUTE ON FUNCTION tenantry_retention_batch(text, text, bigint, timestamptz, integer,
                                                   text, uuid, boolean) TO tenantry_app;
GRANT EXECUTE ON FUNCTION tenantry_retention_expire(text, text, bigint, timestamptz,
                                                    timestamptz, integer) TO tenantry_app;
GRANT EXECUTE ON FUNCTION tenantry_claim_blob_deletions(integer, double precision)
    TO tenantry_app;
GRANT EXECUTE ON FUNCTION tenantry_blob_deleted(text, text, text) TO tenantry_app;
GRANT EXECUTE ON FUNCTION tenantry_retention_gauges(integer) TO tenantry_app;

-- The console's tenants page shows each tenant's retention beside its policy: a read
-- across tenants, so (like tenantry_console_flagged_versions) a function of the console
-- role's alone. runs_days NULL: the tenant never had a policy set (the defaults hold);
-- tombstones_days NULL: kept forever.
CREATE FUNCTION tenantry_console_retention(p_tenants text[])
RETURNS TABLE (tenant_id text, runs_days integer, tombstones_days integer,
               erased_at timestamptz)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public AS $$
    SELECT t.tenant_id, p.runs_days, p.tombstones_days, t.erased_at
    FROM public.tenants t
    LEFT JOIN public.retention_policies p ON p.tenant_id = t.tenant_id
    WHERE t.tenant_id = ANY (p_tenants)
$$;
REVOKE ALL ON FUNCTION tenantry_console_retention(text[]) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION tenantry_console_retention(text[]) TO tenantry_console;

-- The operator's look-up of an erase job by its id alone (GET /admin/v1/erase-jobs/{id}):
-- a read across tenants, so the console role's, with the runs the tenant has left.
CREATE FUNCTION tenantry_console_erase_job(p_job uuid)
RETURNS TABLE (job_id uuid, tenant_id text, status text, runs_total bigint,
               runs_deleted bigint, runs_cancelled bigint, secrets_deleted integer,
               tool_servers_deleted integer, blobs_queued bigint, requested_by text,
               created_at timestamptz, finished_at timestamptz, runs_left bigint)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public AS $$
    SELECT j.job_id, j.tenant_id, j.status, j.runs_total, j.runs_deleted, j.runs_cancelled,
           j.secrets_deleted, j.tool_servers_deleted, j.blobs_queued, j.requested_by,
           j.created_at, j.finished_at,
           (SELECT count(*) FROM public.runs r WHERE r.tenant_id = j.tenant_id)
    FROM public.erase_jobs j WHERE j.job_id = p_job
$$;
REVOKE ALL ON FUNCTION tenantry_console_erase_job(uuid) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION tenantry_console_erase_job(uuid) TO tenantry_console;
