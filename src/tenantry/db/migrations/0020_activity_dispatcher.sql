-- Activity versions and their dispatcher (issue 16, the task half; ADR 0013). An activity
-- task is a run of kind 'activity' whose agent version stands for the activity version
-- (as task types do for 'task'), so admission, the fair claim, fenced leases and the event
-- log are the runs'. What an agent version cannot say is here: the bundle by digest and the
-- attempt settings, immutable once published.
ALTER TABLE runs DROP CONSTRAINT runs_kind_check;
ALTER TABLE runs ADD CONSTRAINT runs_kind_check CHECK (kind IN ('agent', 'task', 'activity'));

-- Code by digest, tenant first: two tenants uploading the same bytes get two rows, so no
-- tenant can learn from a dedupe that another holds a given bundle.
CREATE TABLE activity_bundles (
    tenant_id   text NOT NULL REFERENCES tenants (tenant_id),
    digest      text NOT NULL CHECK (digest ~ '^sha256:[0-9a-f]{64}$'),
    entrypoint  text NOT NULL,
    files       jsonb NOT NULL,  -- {path: base64}; at most 1 MiB of code (bundle.py)
    created_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, digest)
);
ALTER TABLE activity_bundles ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON activity_bundles
    USING (tenant_id = tenantry_current_tenant());
GRANT SELECT, INSERT ON activity_bundles TO tenantry_app;

CREATE TABLE activity_versions (
    tenant_id             text NOT NULL,
    agent_id              uuid NOT NULL,
    version               integer NOT NULL CHECK (version >= 1),
    name                  text NOT NULL,
    bundle_digest         text NOT NULL,
    timeout_s             double precision NOT NULL CHECK (timeout_s > 0 AND timeout_s <= 3600),
    heartbeat_timeout_s   double precision CHECK (heartbeat_timeout_s > 0),
    max_attempts          integer NOT NULL CHECK (max_attempts BETWEEN 1 AND 100),
    backoff_s             double precision NOT NULL CHECK (backoff_s BETWEEN 0 AND 86400),
    secret_names          text[] NOT NULL DEFAULT '{}',
    egress                text[] NOT NULL DEFAULT '{}',
    retryable_exit_codes  integer[] NOT NULL DEFAULT '{}',
    max_sandbox_deaths    integer NOT NULL DEFAULT 3 CHECK (max_sandbox_deaths BETWEEN 1 AND 100),
    created_at            timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, agent_id, version),
    UNIQUE (tenant_id, name, version),
    FOREIGN KEY (tenant_id, agent_id, version)
        REFERENCES agent_versions (tenant_id, agent_id, version),
    FOREIGN KEY (tenant_id, bundle_digest) REFERENCES activity_bundles (tenant_id, digest)
);
ALTER TABLE activity_versions ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON activity_versions
    USING (tenant_id = tenantry_current_tenant());
GRANT SELECT, INSERT ON activity_versions TO tenantry_app;

-- Concurrent activity attempts per tenant (a retry storm burns only its own slots).
ALTER TABLE tenant_policies ADD COLUMN max_activity_slots integer NOT NULL DEFAULT 2
    CHECK (max_activity_slots BETWEEN 1 AND 100000);

CREATE INDEX runs_activity_running ON runs (tenant_id)
    WHERE kind = 'activity' AND status = 'running';

-- The claim for the dispatcher: the fair claim of 0007/0013 (expired leases first, then
-- the tenant with the smallest running / weight under its policy), plus the tenant's
-- max_activity_slots counted over its running activity tasks. A separate function so the
-- platform's claim of agent runs is untouched. Expired leases are re-leased first: they
-- count as running already, so they never push a tenant past its slots.
CREATE FUNCTION tenantry_claim_activities(p_worker text, p_batch integer,
                                          p_lease_seconds double precision)
RETURNS TABLE (tenant_id text, run_id uuid, lease_epoch bigint)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, public AS $$
DECLARE
    v_claimed integer;
    v_tenant text;
    v_run uuid;
    v_skip text[] := '{}';
BEGIN
    RETURN QUERY
    WITH expired AS (
        SELECT r.tenant_id, r.run_id FROM public.runs r
        WHERE r.status = 'running' AND r.lease_expires_at < now() AND r.kind = 'activity'
        ORDER BY r.lease_expires_at
        LIMIT p_batch
        FOR UPDATE SKIP LOCKED
    )
    UPDATE public.runs r
    SET lease_owner = p_worker, lease_epoch = r.lease_epoch + 1,
        lease_expires_at = now() + make_interval(secs => p_lease_seconds), updated_at = now()
    FROM expired
    WHERE r.tenant_id = expired.tenant_id AND r.run_id = expired.run_id
    RETURNING r.tenant_id, r.run_id, r.lease_epoch;
    GET DIAGNOSTICS v_claimed = ROW_COUNT;

    WHILE v_claimed < p_batch LOOP
        -- Never wait for a tenant row another claimer holds (SKIP LOCKED throughout): a
        -- dispatcher coming back empty polls again, which is cheaper than a lock cycle.
        SELECT l.tenant_id INTO v_tenant
        FROM public.tenant_load l
        JOIN public.tenant_policies p ON p.tenant_id = l.tenant_id
        JOIN public.tenant_budget b ON b.tenant_id = l.tenant_id
        WHERE public.tenantry_may_claim(l, p, b) AND l.tenant_id <> ALL (v_skip)
          AND (SELECT count(*) FROM public.runs a
               WHERE a.tenant_id = l.tenant_id AND a.kind = 'activity'
                 AND a.status = 'running') < p.max_activity_slots
        ORDER BY l.running::float8 / p.weight, l.last_claim_at NULLS FIRST, l.tenant_id
        LIMIT 1
        FOR UPDATE OF l SKIP LOCKED;
        EXIT WHEN v_tenant IS NULL;

        SELECT r.run_id INTO v_run FROM public.runs r
        WHERE r.tenant_id = v_tenant AND r.kind = 'activity' AND r.status = 'queued'
          AND (r.available_at IS NULL OR r.available_at <= now())
        ORDER BY (r.priority <> 'interactive'), r.created_at
        LIMIT 1
        FOR UPDATE SKIP LOCKED;
        IF v_run IS NULL THEN
            v_skip := v_skip || v_tenant;
            v_tenant := NULL;
            CONTINUE;
        END IF;

        RETURN QUERY
        UPDATE public.runs r
        SET status = 'running', lease_owner = p_worker, lease_epoch = r.lease_epoch + 1,
            lease_expires_at = now() + make_interval(secs => p_lease_seconds),
            available_at = NULL, started_at = coalesce(r.started_at, clock_timestamp()),
            updated_at = now()
        WHERE r.tenant_id = v_tenant AND r.run_id = v_run
        RETURNING r.tenant_id, r.run_id, r.lease_epoch;
        UPDATE public.tenant_load SET last_claim_at = clock_timestamp()
        WHERE tenant_load.tenant_id = v_tenant;
        v_claimed := v_claimed + 1;
        v_tenant := NULL;
        v_run := NULL;
    END LOOP;
END
$$;
REVOKE ALL ON FUNCTION tenantry_claim_activities(text, integer, double precision) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION tenantry_claim_activities(text, integer, double precision)
    TO tenantry_app;
