-- The schema the migrations (src/tenantry/db/migrations/NNNN_*.sql) and the routines
-- (src/tenantry/db/routines/*.sql) produce in a fresh database: pg_dump --schema-only
-- --no-owner --no-privileges, less what varies. Written by `make schema`;
-- tests/integration/test_migrations.py checks it. Edit migrations and routines, not this.

--
-- PostgreSQL database dump
--

--
-- Name: tenantry_add_blob(text, text, uuid, text, bigint, bigint); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.tenantry_add_blob(p_tenant text, p_ref text, p_run uuid, p_kind text, p_bytes bigint, p_quota bigint) RETURNS TABLE(stored boolean, used bigint)
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'public'
    AS $$
DECLARE
    v_used bigint;
BEGIN
    PERFORM set_config('tenantry.tenant_id', p_tenant, true);
    INSERT INTO public.blob_usage AS u (tenant_id) VALUES (p_tenant)
    ON CONFLICT (tenant_id) DO UPDATE SET bytes = u.bytes
    RETURNING u.bytes INTO v_used;
    IF EXISTS (SELECT 1 FROM public.blobs b WHERE b.tenant_id = p_tenant AND b.ref = p_ref)
    THEN
        RETURN QUERY SELECT true, v_used;
        RETURN;
    END IF;
    IF p_quota IS NOT NULL AND v_used + p_bytes > p_quota THEN
        RETURN QUERY SELECT false, v_used;
        RETURN;
    END IF;
    INSERT INTO public.blobs (tenant_id, ref, run_id, kind, bytes)
    VALUES (p_tenant, p_ref, p_run, p_kind, p_bytes)
    ON CONFLICT (tenant_id, ref) DO NOTHING;
    IF FOUND THEN
        UPDATE public.blob_usage u SET bytes = u.bytes + p_bytes WHERE u.tenant_id = p_tenant;
        v_used := v_used + p_bytes;
    END IF;
    RETURN QUERY SELECT true, v_used;
END
$$;

--
-- Name: tenantry_admin_tenants(text, integer); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.tenantry_admin_tenants(p_after text, p_limit integer) RETURNS TABLE(tenant_id text, name text, region text, plan text, home_cell text, created_at timestamp with time zone)
    LANGUAGE sql STABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'public'
    AS $$
    SELECT t.tenant_id, t.name, t.region, t.plan, t.home_cell, t.created_at
    FROM public.tenants t
    WHERE p_after IS NULL OR t.tenant_id > p_after
    ORDER BY t.tenant_id
    LIMIT least(greatest(p_limit, 1), 200)
$$;

--
-- Name: tenantry_app_session(bytea); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.tenantry_app_session(p_session_hash bytea) RETURNS TABLE(tenant_id text, user_id uuid, email text, role text, expires_at timestamp with time zone)
    LANGUAGE sql STABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'public'
    AS $$
    SELECT s.tenant_id, s.user_id, u.email, u.role, s.expires_at
    FROM public.app_sessions s
    JOIN public.tenant_users u ON u.tenant_id = s.tenant_id AND u.user_id = s.user_id
    JOIN public.tenants t ON t.tenant_id = s.tenant_id
    WHERE s.session_hash = p_session_hash AND s.revoked_at IS NULL AND s.expires_at > now()
      AND u.disabled_at IS NULL AND t.erased_at IS NULL
$$;

--
-- Name: tenantry_app_sign_in(bytea, bytea, integer); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.tenantry_app_sign_in(p_link_hash bytea, p_session_hash bytea, p_session_seconds integer) RETURNS TABLE(tenant_id text, user_id uuid)
    LANGUAGE sql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'public'
    AS $$
    WITH used AS (
        UPDATE public.sign_in_links l SET used_at = now()
        WHERE l.link_hash = p_link_hash AND l.used_at IS NULL AND l.expires_at > now()
          AND EXISTS (SELECT 1 FROM public.tenant_users u
                      JOIN public.tenants t ON t.tenant_id = u.tenant_id
                      WHERE u.tenant_id = l.tenant_id AND u.user_id = l.user_id
                        AND u.disabled_at IS NULL AND t.erased_at IS NULL)
        RETURNING l.tenant_id, l.user_id
    ), made AS (
        INSERT INTO public.app_sessions (tenant_id, session_hash, user_id, expires_at)
        SELECT used.tenant_id, p_session_hash, used.user_id,
               now() + make_interval(secs => least(greatest(p_session_seconds, 60), 86400))
        FROM used
        RETURNING app_sessions.tenant_id, app_sessions.user_id
    )
    SELECT made.tenant_id, made.user_id FROM made
$$;

--
-- Name: tenantry_app_sign_in_oidc(text, text, text, text, bytea, integer); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.tenantry_app_sign_in_oidc(p_issuer text, p_subject text, p_email text, p_tenant text, p_session_hash bytea, p_session_seconds integer) RETURNS TABLE(tenant_id text, user_id uuid, signed_in boolean)
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'public'
    AS $$
DECLARE
    v_tenants text[];
    v_users uuid[];
BEGIN
    SELECT array_agg(u.tenant_id ORDER BY u.tenant_id), array_agg(u.user_id ORDER BY u.tenant_id)
    INTO v_tenants, v_users
    FROM public.tenant_users u JOIN public.tenants t ON t.tenant_id = u.tenant_id
    WHERE lower(u.email) = lower(p_email) AND u.disabled_at IS NULL AND t.erased_at IS NULL
      AND (u.oidc_subject IS NULL OR (u.oidc_issuer = p_issuer AND u.oidc_subject = p_subject))
      AND (p_tenant IS NULL OR u.tenant_id = p_tenant);
    IF coalesce(cardinality(v_users), 0) <> 1 THEN
        RETURN QUERY SELECT c.tenant_id, c.user_id, false
                     FROM unnest(v_tenants, v_users) AS c (tenant_id, user_id) LIMIT 50;
        RETURN;
    END IF;
    -- The one user, still as found (a change since is no sign-in), bound and signed in.
    RETURN QUERY
    WITH bound AS (
        UPDATE public.tenant_users u
        SET oidc_issuer = p_issuer, oidc_subject = p_subject
        WHERE u.tenant_id = v_tenants[1] AND u.user_id = v_users[1]
          AND u.disabled_at IS NULL
          AND (u.oidc_subject IS NULL
               OR (u.oidc_issuer = p_issuer AND u.oidc_subject = p_subject))
        RETURNING u.tenant_id, u.user_id
    ), made AS (
        INSERT INTO public.app_sessions (tenant_id, session_hash, user_id, expires_at)
        SELECT bound.tenant_id, p_session_hash, bound.user_id,
               now() + make_interval(secs => least(greatest(p_session_seconds, 60), 86400))
        FROM bound
        RETURNING app_sessions.tenant_id, app_sessions.user_id
    )
    SELECT made.tenant_id, made.user_id, true FROM made;
END
$$;

--
-- Name: tenantry_authenticate(bytea); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.tenantry_authenticate(p_key_hash bytea) RETURNS text
    LANGUAGE sql STABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'public'
    AS $$
    SELECT tenant_id FROM public.api_keys
    WHERE key_hash = p_key_hash AND revoked_at IS NULL
$$;

--
-- Name: tenantry_authenticate_v2(bytea); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.tenantry_authenticate_v2(p_key_hash bytea) RETURNS TABLE(tenant_id text, key_id uuid, scopes text[], expires_at timestamp with time zone)
    LANGUAGE sql STABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'public'
    AS $$
    SELECT k.tenant_id, k.key_id, k.scopes, k.expires_at FROM public.api_keys k
    WHERE k.key_hash = p_key_hash AND k.revoked_at IS NULL
$$;

--
-- Name: tenantry_blob_deleted(text, text, text); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.tenantry_blob_deleted(p_tenant text, p_ref text, p_error text) RETURNS void
    LANGUAGE sql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'public'
    AS $$
    DELETE FROM public.blob_deletions WHERE tenant_id = p_tenant AND ref = p_ref
      AND p_error IS NULL;
    UPDATE public.blob_deletions SET last_error = p_error
    WHERE tenant_id = p_tenant AND ref = p_ref AND p_error IS NOT NULL;
$$;

--
-- Name: tenant_budget; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.tenant_budget (
    tenant_id text NOT NULL,
    bucket_tokens double precision,
    bucket_at timestamp with time zone DEFAULT now() NOT NULL,
    spend_month date DEFAULT (date_trunc('month'::text, now()))::date NOT NULL,
    spent_micros bigint DEFAULT 0 NOT NULL,
    reserved_micros bigint DEFAULT 0 NOT NULL
);

--
-- Name: tenant_policies; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.tenant_policies (
    tenant_id text NOT NULL,
    weight integer DEFAULT 1 NOT NULL,
    max_running integer DEFAULT 100 NOT NULL,
    max_queued integer DEFAULT 10000 NOT NULL,
    tokens_per_minute bigint,
    monthly_spend_cap_micros bigint,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    max_activity_slots integer DEFAULT 2 NOT NULL,
    CONSTRAINT tenant_policies_max_activity_slots_check CHECK (((max_activity_slots >= 1) AND (max_activity_slots <= 100000))),
    CONSTRAINT tenant_policies_max_queued_check CHECK (((max_queued >= 1) AND (max_queued <= 10000000))),
    CONSTRAINT tenant_policies_max_running_check CHECK (((max_running >= 1) AND (max_running <= 100000))),
    CONSTRAINT tenant_policies_monthly_spend_cap_micros_check CHECK ((monthly_spend_cap_micros >= 0)),
    CONSTRAINT tenant_policies_tokens_per_minute_check CHECK ((tokens_per_minute > 0)),
    CONSTRAINT tenant_policies_weight_check CHECK (((weight >= 1) AND (weight <= 1000)))
);

--
-- Name: tenantry_bucket_level(public.tenant_budget, public.tenant_policies); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.tenantry_bucket_level(b public.tenant_budget, p public.tenant_policies) RETURNS double precision
    LANGUAGE sql STABLE
    SET search_path TO 'pg_catalog', 'public'
    AS $$
    SELECT CASE WHEN p.tokens_per_minute IS NULL THEN NULL ELSE
        least(p.tokens_per_minute::float8,
              coalesce(b.bucket_tokens, p.tokens_per_minute::float8)
              + extract(epoch FROM now() - b.bucket_at) * p.tokens_per_minute / 60.0)
    END
$$;

--
-- Name: tenantry_budget_now(public.tenant_budget); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.tenantry_budget_now(b public.tenant_budget) RETURNS public.tenant_budget
    LANGUAGE sql STABLE
    SET search_path TO 'pg_catalog', 'public'
    AS $$
    SELECT public.tenantry_budget_with(
        b,
        (coalesce(sum(r.cost_micros) FILTER (WHERE r.unfolded AND r.counted), 0)
         - coalesce(sum(r.cost_micros) FILTER (
               WHERE r.status = 'reserved' AND NOT r.counted), 0))::bigint,
        coalesce(sum(r.spent_micros) FILTER (
            WHERE r.unfolded AND r.closed_at >= date_trunc('month', now())), 0)::bigint,
        coalesce(sum(CASE WHEN r.counted THEN r.tokens ELSE 0 END - r.spent_tokens)
                 FILTER (WHERE r.unfolded), 0)::bigint)
    FROM public.budget_reservations r
    WHERE r.tenant_id = b.tenant_id
      AND (r.unfolded OR (r.status = 'reserved' AND NOT r.counted))
$$;

--
-- Name: tenantry_budget_with(public.tenant_budget, bigint, bigint, bigint); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.tenantry_budget_with(b public.tenant_budget, p_estimates bigint, p_month_costs bigint, p_tokens_back bigint) RETURNS public.tenant_budget
    LANGUAGE plpgsql STABLE
    SET search_path TO 'pg_catalog', 'public'
    AS $$
BEGIN
    IF b.spend_month < date_trunc('month', now())::date THEN
        b.spent_micros := 0;
        b.spend_month := date_trunc('month', now())::date;
    END IF;
    b.spent_micros := b.spent_micros + p_month_costs;
    b.reserved_micros := greatest(b.reserved_micros - p_estimates, 0);
    IF b.bucket_tokens IS NOT NULL THEN
        b.bucket_tokens := b.bucket_tokens + p_tokens_back;
    END IF;
    RETURN b;
END
$$;

--
-- Name: tenantry_cap_changed(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.tenantry_cap_changed() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'public'
    AS $$
BEGIN
    PERFORM public.tenantry_wake_spend_capped(NEW.tenant_id, 1000);
    RETURN NULL;
END
$$;

--
-- Name: tenantry_claim_activities(text, integer, double precision); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.tenantry_claim_activities(p_worker text, p_batch integer, p_lease_seconds double precision) RETURNS TABLE(tenant_id text, run_id uuid, lease_epoch bigint)
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'public'
    AS $$
DECLARE
    v_claimed integer;
    v_tenant text;
    v_run uuid;
    v_skip text[] := '{}';
    v_dead text[];
    v_count integer;
    v_frozen text[] := public.tenantry_frozen_tenants();
BEGIN
    -- Dead registered dispatchers' tasks first, as in tenantry_claim_runs (never the
    -- claimer's own: it is alive, whatever its session says).
    v_dead := array_remove(public.tenantry_dead_workers(), p_worker);
    v_claimed := 0;
    IF cardinality(v_dead) > 0 THEN
        RETURN QUERY
        WITH orphaned AS (
            SELECT r.tenant_id, r.run_id FROM public.runs r
            WHERE r.status = 'running' AND r.lease_owner = ANY (v_dead)
              AND r.kind = 'activity' AND r.tenant_id <> ALL (v_frozen)
            ORDER BY r.lease_expires_at
            LIMIT p_batch
            FOR UPDATE SKIP LOCKED
        )
        UPDATE public.runs r
        SET lease_owner = p_worker, lease_epoch = r.lease_epoch + 1,
            lease_expires_at = now() + make_interval(secs => p_lease_seconds),
            updated_at = now()
        FROM orphaned
        WHERE r.tenant_id = orphaned.tenant_id AND r.run_id = orphaned.run_id
        RETURNING r.tenant_id, r.run_id, r.lease_epoch;
        GET DIAGNOSTICS v_claimed = ROW_COUNT;
        PERFORM public.tenantry_forget_dead_workers(v_dead);
    END IF;

    IF v_claimed < p_batch THEN
        RETURN QUERY
        WITH expired AS (
            SELECT r.tenant_id, r.run_id FROM public.runs r
            WHERE r.status = 'running' AND r.lease_expires_at < now()
              AND r.kind = 'activity' AND r.tenant_id <> ALL (v_frozen)
            ORDER BY r.lease_expires_at
            LIMIT p_batch - v_claimed
            FOR UPDATE SKIP LOCKED
        )
        UPDATE public.runs r
        SET lease_owner = p_worker, lease_epoch = r.lease_epoch + 1,
            lease_expires_at = now() + make_interval(secs => p_lease_seconds),
            updated_at = now()
        FROM expired
        WHERE r.tenant_id = expired.tenant_id AND r.run_id = expired.run_id
        RETURNING r.tenant_id, r.run_id, r.lease_epoch;
        GET DIAGNOSTICS v_count = ROW_COUNT;
        v_claimed := v_claimed + v_count;
    END IF;

    WHILE v_claimed < p_batch LOOP
        -- Never wait for a tenant row another claimer holds (SKIP LOCKED throughout): a
        -- dispatcher coming back empty polls again, which is cheaper than a lock cycle.
        SELECT l.tenant_id INTO v_tenant
        FROM public.tenant_load l
        JOIN public.tenant_policies p ON p.tenant_id = l.tenant_id
        JOIN public.tenant_budget b ON b.tenant_id = l.tenant_id
        WHERE public.tenantry_may_claim(l, p, b) AND l.tenant_id <> ALL (v_skip)
          AND l.tenant_id <> ALL (v_frozen)
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

--
-- Name: tenantry_claim_activity_next(text, text, uuid, integer, double precision); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.tenantry_claim_activity_next(p_worker text, p_tenant text, p_agent uuid, p_version integer, p_lease_seconds double precision) RETURNS TABLE(tenant_id text, run_id uuid, lease_epoch bigint)
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'public'
    AS $$
DECLARE
    v_tenant text;
    v_run uuid;
BEGIN
    SELECT l.tenant_id INTO v_tenant
    FROM public.tenant_load l
    JOIN public.tenant_policies p ON p.tenant_id = l.tenant_id
    JOIN public.tenant_budget b ON b.tenant_id = l.tenant_id
    WHERE l.tenant_id = p_tenant AND public.tenantry_may_claim(l, p, b)
      AND p_tenant <> ALL (public.tenantry_frozen_tenants())
      AND (SELECT count(*) FROM public.runs a
           WHERE a.tenant_id = l.tenant_id AND a.kind = 'activity'
             AND a.status = 'running') < p.max_activity_slots
    FOR UPDATE OF l;
    IF v_tenant IS NULL THEN
        RETURN;
    END IF;
    SELECT r.run_id INTO v_run FROM public.runs r
    WHERE r.tenant_id = p_tenant AND r.kind = 'activity' AND r.status = 'queued'
      AND r.agent_id = p_agent AND r.agent_version = p_version
      AND (r.available_at IS NULL OR r.available_at <= now())
    ORDER BY (r.priority <> 'interactive'), r.created_at
    LIMIT 1
    FOR UPDATE SKIP LOCKED;
    IF v_run IS NULL THEN
        RETURN;
    END IF;
    RETURN QUERY
    UPDATE public.runs r
    SET status = 'running', lease_owner = p_worker, lease_epoch = r.lease_epoch + 1,
        lease_expires_at = now() + make_interval(secs => p_lease_seconds),
        available_at = NULL, started_at = coalesce(r.started_at, clock_timestamp()),
        updated_at = now()
    WHERE r.tenant_id = p_tenant AND r.run_id = v_run
    RETURNING r.tenant_id, r.run_id, r.lease_epoch;
    UPDATE public.tenant_load SET last_claim_at = clock_timestamp()
    WHERE tenant_load.tenant_id = p_tenant;
END
$$;

--
-- Name: tenantry_claim_blob_deletions(integer, double precision); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.tenantry_claim_blob_deletions(p_limit integer, p_seconds double precision) RETURNS TABLE(tenant_id text, ref text)
    LANGUAGE sql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'public'
    AS $$
    UPDATE public.blob_deletions d
    SET attempts = d.attempts + 1,
        next_at = clock_timestamp() + make_interval(secs => p_seconds)
    FROM (SELECT x.tenant_id, x.ref FROM public.blob_deletions x
          WHERE x.next_at <= clock_timestamp()
            AND x.tenant_id <> ALL (public.tenantry_frozen_tenants())
          ORDER BY x.next_at LIMIT p_limit FOR UPDATE SKIP LOCKED) due
    WHERE d.tenant_id = due.tenant_id AND d.ref = due.ref
    RETURNING d.tenant_id, d.ref
$$;

--
-- Name: tenantry_claim_endpoint_deliveries(integer, double precision, integer, integer, text[], integer[]); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.tenantry_claim_endpoint_deliveries(p_batch integer, p_seconds double precision, p_max_attempts integer, p_per_tenant integer, p_busy_tenants text[], p_busy_counts integer[]) RETURNS TABLE(tenant_id text, run_id uuid, endpoint_id uuid, attempts integer, spent boolean)
    LANGUAGE sql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'public'
    AS $$
    WITH busy AS (
        SELECT b.tenant_id, b.n FROM unnest(p_busy_tenants, p_busy_counts) AS b(tenant_id, n)
    ), ranked AS (
        SELECT d.tenant_id, d.run_id, d.endpoint_id, d.next_at,
               row_number() OVER (PARTITION BY d.tenant_id ORDER BY d.next_at) AS nth
        FROM public.endpoint_deliveries d
        WHERE d.state = 'pending' AND d.next_at <= now() AND d.attempts < p_max_attempts
          AND d.tenant_id <> ALL (public.tenantry_frozen_tenants())
    ), due AS (
        SELECT d.tenant_id, d.run_id, d.endpoint_id FROM public.endpoint_deliveries d
        JOIN ranked k ON k.tenant_id = d.tenant_id AND k.run_id = d.run_id
                     AND k.endpoint_id = d.endpoint_id
        LEFT JOIN busy b ON b.tenant_id = k.tenant_id
        WHERE k.nth + coalesce(b.n, 0) <= p_per_tenant
          AND d.state = 'pending' AND d.attempts < p_max_attempts
        ORDER BY k.next_at
        LIMIT p_batch
        FOR UPDATE OF d SKIP LOCKED
    ), lapsed AS (
        SELECT d.tenant_id, d.run_id, d.endpoint_id FROM public.endpoint_deliveries d
        WHERE d.state = 'pending' AND d.next_at <= now() AND d.attempts >= p_max_attempts
        ORDER BY d.next_at
        LIMIT p_batch
        FOR UPDATE SKIP LOCKED
    ), claimed AS (
        UPDATE public.endpoint_deliveries d
        SET next_at = now() + make_interval(secs => p_seconds), attempts = d.attempts + 1
        FROM due
        WHERE d.tenant_id = due.tenant_id AND d.run_id = due.run_id
          AND d.endpoint_id = due.endpoint_id
        RETURNING d.tenant_id, d.run_id, d.endpoint_id, d.attempts, false AS spent
    ), spent AS (
        UPDATE public.endpoint_deliveries d
        SET next_at = now() + make_interval(secs => p_seconds)
        FROM lapsed
        WHERE d.tenant_id = lapsed.tenant_id AND d.run_id = lapsed.run_id
          AND d.endpoint_id = lapsed.endpoint_id
        RETURNING d.tenant_id, d.run_id, d.endpoint_id, d.attempts, true AS spent
    )
    SELECT * FROM claimed UNION ALL SELECT * FROM spent
$$;

--
-- Name: tenantry_claim_export(text, double precision, integer, integer); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.tenantry_claim_export(p_owner text, p_seconds double precision, p_max_attempts integer, p_keep_days integer) RETURNS TABLE(tenant_id text, export_id uuid, epoch bigint, archive_ref text)
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'public'
    AS $$
DECLARE
    v_tenant text;
    v_export uuid;
    v_attempts integer;
    v_old_ref text;
    v_epoch bigint;
    v_ref text;
BEGIN
    LOOP
        SELECT x.tenant_id, x.export_id, x.attempts, x.archive_ref
        INTO v_tenant, v_export, v_attempts, v_old_ref
        FROM public.exports x
        JOIN public.tenants t ON t.tenant_id = x.tenant_id
        WHERE (x.status = 'queued'
               OR (x.status = 'running' AND x.lease_expires_at < clock_timestamp()))
          AND t.erased_at IS NULL
          AND x.tenant_id <> ALL (public.tenantry_frozen_tenants())
        ORDER BY x.created_at
        LIMIT 1
        FOR UPDATE OF x SKIP LOCKED;
        IF NOT FOUND THEN
            RETURN;
        END IF;
        IF v_old_ref IS NOT NULL THEN
            INSERT INTO public.blob_deletions (tenant_id, ref, run_id)
            VALUES (v_tenant, v_old_ref, NULL)
            ON CONFLICT ON CONSTRAINT blob_deletions_pkey DO NOTHING;
        END IF;
        IF v_attempts >= p_max_attempts THEN
            UPDATE public.exports x
            SET status = 'failed', lease_owner = NULL, lease_expires_at = NULL,
                archive_ref = NULL, finished_at = clock_timestamp(),
                expires_at = clock_timestamp() + make_interval(days => p_keep_days),
                error = left('gave up after ' || v_attempts || ' attempts'
                             || coalesce(': ' || x.error, ''), 500)
            WHERE x.tenant_id = v_tenant AND x.export_id = v_export;
            CONTINUE;
        END IF;
        UPDATE public.exports x
        SET status = 'running', lease_owner = p_owner, lease_epoch = x.lease_epoch + 1,
            lease_expires_at = clock_timestamp() + make_interval(secs => p_seconds),
            attempts = x.attempts + 1, started_at = coalesce(x.started_at, clock_timestamp()),
            archive_ref = 'export_' || replace(x.export_id::text, '-', '') || '.'
                          || (x.lease_epoch + 1) || '.tar.gz'
        WHERE x.tenant_id = v_tenant AND x.export_id = v_export
        RETURNING x.lease_epoch, x.archive_ref INTO v_epoch, v_ref;
        RETURN QUERY SELECT v_tenant, v_export, v_epoch, v_ref;
        RETURN;
    END LOOP;
END
$$;

--
-- Name: tenantry_claim_runs(text, integer, double precision, text, boolean); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.tenantry_claim_runs(p_worker text, p_batch integer, p_lease_seconds double precision, p_kind text DEFAULT 'agent'::text, p_in_flight_first boolean DEFAULT false) RETURNS TABLE(tenant_id text, run_id uuid, lease_epoch bigint, taken_from text, lease_was_until timestamp with time zone, owner_gone boolean)
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'public'
    AS $$
DECLARE
    v_claimed integer;
    v_tenant text;
    v_run uuid;
    v_skip text[] := '{}';
    v_holding boolean := false;
    v_in_flight boolean := coalesce(p_in_flight_first, false);  -- the tier being served
    v_dead text[];
    v_count integer;
    v_frozen text[] := public.tenantry_frozen_tenants();
BEGIN
    -- Held shared until this claim commits. Never the claimer itself: it is alive, whatever
    -- its session says (its lock connection may have dropped a moment before it noticed;
    -- it claims nothing once it has), and its runs are still in its hands.
    v_dead := array_remove(public.tenantry_dead_workers(), p_worker);

    v_claimed := 0;
    IF cardinality(v_dead) > 0 THEN
        -- Their runs now, whatever their leases say: they are voided like expired ones
        -- (epoch + 1), so a write the dead owner left in flight is refused.
        RETURN QUERY
        WITH orphaned AS (
            SELECT r.tenant_id, r.run_id, r.lease_owner, r.lease_expires_at FROM public.runs r
            WHERE r.status = 'running' AND r.lease_owner = ANY (v_dead) AND r.kind = p_kind
              AND r.tenant_id <> ALL (v_frozen)
            ORDER BY r.lease_expires_at
            LIMIT p_batch
            FOR UPDATE SKIP LOCKED
        )
        UPDATE public.runs r
        SET lease_owner = p_worker, lease_epoch = r.lease_epoch + 1,
            lease_expires_at = now() + make_interval(secs => p_lease_seconds),
            updated_at = now()
        FROM orphaned
        WHERE r.tenant_id = orphaned.tenant_id AND r.run_id = orphaned.run_id
        RETURNING r.tenant_id, r.run_id, r.lease_epoch, orphaned.lease_owner,
                  orphaned.lease_expires_at, true;
        GET DIAGNOSTICS v_claimed = ROW_COUNT;
        PERFORM public.tenantry_forget_dead_workers(v_dead);
    END IF;

    IF v_claimed < p_batch THEN
        RETURN QUERY
        WITH expired AS (
            SELECT r.tenant_id, r.run_id, r.lease_owner, r.lease_expires_at FROM public.runs r
            WHERE r.status = 'running' AND r.lease_expires_at < now() AND r.kind = p_kind
              AND r.tenant_id <> ALL (v_frozen)
            ORDER BY r.lease_expires_at
            LIMIT p_batch - v_claimed
            FOR UPDATE SKIP LOCKED
        )
        UPDATE public.runs r
        SET lease_owner = p_worker, lease_epoch = r.lease_epoch + 1,
            lease_expires_at = now() + make_interval(secs => p_lease_seconds),
            updated_at = now()
        FROM expired
        WHERE r.tenant_id = expired.tenant_id AND r.run_id = expired.run_id
        RETURNING r.tenant_id, r.run_id, r.lease_epoch, expired.lease_owner,
                  expired.lease_expires_at, false;
        GET DIAGNOSTICS v_count = ROW_COUNT;
        v_claimed := v_claimed + v_count;
    END IF;

    WHILE v_claimed < p_batch LOOP
        IF v_holding THEN
            -- Holding a tenant row already: never wait for another (two claimers waiting
            -- for each other's rows would deadlock); one being claimed for is skipped.
            SELECT l.tenant_id INTO v_tenant
            FROM public.tenant_load l
            JOIN public.tenant_policies p ON p.tenant_id = l.tenant_id
            JOIN public.tenant_budget b ON b.tenant_id = l.tenant_id
            WHERE public.tenantry_may_claim(l, p, b) AND l.tenant_id <> ALL (v_skip)
              AND l.tenant_id <> ALL (v_frozen)
              AND (NOT v_in_flight OR EXISTS (
                  SELECT 1 FROM public.runs r
                  WHERE r.tenant_id = l.tenant_id AND r.kind = p_kind
                    AND r.status = 'queued' AND r.steps > 0
                    AND (r.available_at IS NULL OR r.available_at <= now())))
            ORDER BY l.running::float8 / p.weight, l.last_claim_at NULLS FIRST, l.tenant_id
            LIMIT 1
            FOR UPDATE OF l SKIP LOCKED;
        ELSE
            -- Holding none: wait for the best tenant's row if another claimer has it (a
            -- few ms), rather than come back empty while it has work. The row is checked
            -- again once locked.
            SELECT l.tenant_id INTO v_tenant
            FROM public.tenant_load l
            JOIN public.tenant_policies p ON p.tenant_id = l.tenant_id
            JOIN public.tenant_budget b ON b.tenant_id = l.tenant_id
            WHERE public.tenantry_may_claim(l, p, b) AND l.tenant_id <> ALL (v_skip)
              AND l.tenant_id <> ALL (v_frozen)
              AND (NOT v_in_flight OR EXISTS (
                  SELECT 1 FROM public.runs r
                  WHERE r.tenant_id = l.tenant_id AND r.kind = p_kind
                    AND r.status = 'queued' AND r.steps > 0
                    AND (r.available_at IS NULL OR r.available_at <= now())))
            ORDER BY l.running::float8 / p.weight, l.last_claim_at NULLS FIRST, l.tenant_id
            LIMIT 1
            FOR UPDATE OF l;
        END IF;
        IF v_tenant IS NULL THEN
            EXIT WHEN NOT v_in_flight;
            -- No tenant has in-flight work left to claim: new runs now, in the fair order.
            -- Tenants skipped in that tier may still have new runs.
            v_in_flight := false;
            v_skip := '{}';
            CONTINUE;
        END IF;
        v_holding := true;

        SELECT r.run_id INTO v_run FROM public.runs r
        WHERE r.tenant_id = v_tenant AND r.kind = p_kind AND r.status = 'queued'
          AND (r.available_at IS NULL OR r.available_at <= now())
          AND (NOT v_in_flight OR r.steps > 0)
        ORDER BY (r.steps = 0), (r.priority <> 'interactive'), r.created_at
        LIMIT 1
        FOR UPDATE SKIP LOCKED;
        IF v_run IS NULL THEN  -- all its queued runs are held back (or being claimed)
            v_skip := v_skip || v_tenant;
            v_tenant := NULL;
            CONTINUE;
        END IF;

        RETURN QUERY
        UPDATE public.runs r
        SET status = 'running', lease_owner = p_worker, lease_epoch = r.lease_epoch + 1,
            lease_expires_at = now() + make_interval(secs => p_lease_seconds),
            -- The moment of the claim, not the start of its transaction (which may have
            -- waited for a tenant row): queue waits are never negative.
            available_at = NULL, started_at = coalesce(r.started_at, clock_timestamp()),
            updated_at = now()
        WHERE r.tenant_id = v_tenant AND r.run_id = v_run
        RETURNING r.tenant_id, r.run_id, r.lease_epoch, NULL::text, NULL::timestamptz,
                  false;
        UPDATE public.tenant_load SET last_claim_at = clock_timestamp()
        WHERE tenant_load.tenant_id = v_tenant;
        v_claimed := v_claimed + 1;
        v_tenant := NULL;
        v_run := NULL;
    END LOOP;
END
$$;

--
-- Name: tenantry_claim_runs_fifo(text, integer, double precision); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.tenantry_claim_runs_fifo(p_worker text, p_batch integer, p_lease_seconds double precision) RETURNS TABLE(tenant_id text, run_id uuid, lease_epoch bigint)
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'public'
    AS $$
DECLARE
    v_tenants text[];
    v_frozen text[] := public.tenantry_frozen_tenants();
BEGIN
    CREATE TEMP TABLE IF NOT EXISTS fifo_picked (tenant_id text, run_id uuid, expired boolean)
        ON COMMIT DROP;
    INSERT INTO fifo_picked
    SELECT r.tenant_id, r.run_id, true FROM public.runs r
    WHERE r.status = 'running' AND r.lease_expires_at < now() AND r.kind = 'agent'
      AND r.tenant_id <> ALL (v_frozen)
    ORDER BY r.lease_expires_at LIMIT p_batch
    FOR UPDATE SKIP LOCKED;
    INSERT INTO fifo_picked
    SELECT r.tenant_id, r.run_id, false FROM public.runs r
    WHERE r.status = 'queued' AND r.kind = 'agent' AND r.tenant_id <> ALL (v_frozen)
      AND (r.available_at IS NULL OR r.available_at <= now())
    ORDER BY r.created_at LIMIT greatest(p_batch - (SELECT count(*) FROM fifo_picked), 0)
    FOR UPDATE SKIP LOCKED;
    -- The status change's trigger locks each tenant's load row: take them first, in one
    -- order, so two claimers (or a claimer and a driver) never wait for each other in a
    -- cycle.
    SELECT array_agg(DISTINCT f.tenant_id ORDER BY f.tenant_id) INTO v_tenants
    FROM fifo_picked f WHERE NOT f.expired;
    PERFORM 1 FROM public.tenant_load l WHERE l.tenant_id = ANY (v_tenants)
    ORDER BY l.tenant_id FOR UPDATE;
    RETURN QUERY
    UPDATE public.runs r
    SET status = 'running', lease_owner = p_worker, lease_epoch = r.lease_epoch + 1,
        lease_expires_at = now() + make_interval(secs => p_lease_seconds),
        available_at = NULL, started_at = coalesce(r.started_at, clock_timestamp()),
        updated_at = now()
    FROM fifo_picked f
    WHERE r.tenant_id = f.tenant_id AND r.run_id = f.run_id
    RETURNING r.tenant_id, r.run_id, r.lease_epoch;
    DROP TABLE fifo_picked;
END
$$;

--
-- Name: tenantry_claim_webhooks(integer, double precision, integer, integer, text[], integer[]); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.tenantry_claim_webhooks(p_batch integer, p_seconds double precision, p_max_attempts integer, p_per_tenant integer, p_busy_tenants text[], p_busy_counts integer[]) RETURNS TABLE(tenant_id text, run_id uuid, attempts integer)
    LANGUAGE sql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'public'
    AS $$
    WITH busy AS (
        SELECT b.tenant_id, b.n FROM unnest(p_busy_tenants, p_busy_counts) AS b(tenant_id, n)
    ), ranked AS (
        SELECT r.tenant_id, r.run_id, r.webhook_next_at,
               row_number() OVER (PARTITION BY r.tenant_id ORDER BY r.webhook_next_at) AS nth
        FROM public.runs r
        WHERE r.webhook_state = 'pending' AND r.webhook_next_at <= now()
          AND r.webhook_attempts < p_max_attempts
          AND r.tenant_id <> ALL (public.tenantry_frozen_tenants())
    ), due AS (
        SELECT r.tenant_id, r.run_id FROM public.runs r
        JOIN ranked k ON k.tenant_id = r.tenant_id AND k.run_id = r.run_id
        LEFT JOIN busy b ON b.tenant_id = k.tenant_id
        WHERE k.nth + coalesce(b.n, 0) <= p_per_tenant
          AND r.webhook_state = 'pending' AND r.webhook_attempts < p_max_attempts
        ORDER BY k.webhook_next_at
        LIMIT p_batch
        FOR UPDATE OF r SKIP LOCKED
    )
    UPDATE public.runs r
    SET webhook_next_at = now() + make_interval(secs => p_seconds),
        webhook_attempts = r.webhook_attempts + 1
    FROM due
    WHERE r.tenant_id = due.tenant_id AND r.run_id = due.run_id
    RETURNING r.tenant_id, r.run_id, r.webhook_attempts
$$;

--
-- Name: tenantry_cleanup_due(double precision, integer); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.tenantry_cleanup_due(p_every_seconds double precision, p_limit integer) RETURNS TABLE(tenant_id text)
    LANGUAGE sql STABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'public'
    AS $$
    SELECT t.tenant_id FROM public.tenants t
    LEFT JOIN public.cleanup_leases l ON l.tenant_id = t.tenant_id
    WHERE t.tenant_id <> ALL (public.tenantry_frozen_tenants())
      AND (l.expires_at IS NULL OR l.expires_at < clock_timestamp())
      AND (l.last_pass_at IS NULL
           OR l.last_pass_at < clock_timestamp() - make_interval(secs => p_every_seconds)
           OR t.erased_at IS NOT NULL)
    ORDER BY l.last_pass_at NULLS FIRST, t.tenant_id
    LIMIT p_limit
$$;

--
-- Name: tenantry_close_reservation(text, uuid, bigint, uuid, text, bigint, bigint); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.tenantry_close_reservation(p_tenant text, p_run uuid, p_epoch bigint, p_reservation uuid, p_status text, p_tokens bigint, p_cost bigint) RETURNS boolean
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'public'
    AS $$
BEGIN
    UPDATE public.budget_reservations b SET
        status = p_status, closed_at = now(), spent_tokens = p_tokens, spent_micros = p_cost,
        unfolded = true
    FROM public.runs r
    WHERE b.tenant_id = p_tenant AND b.reservation_id = p_reservation AND b.run_id = p_run
      AND b.status = 'reserved' AND b.lease_epoch = p_epoch
      AND r.tenant_id = b.tenant_id AND r.run_id = b.run_id AND r.lease_epoch = p_epoch
      AND r.status = 'running';
    RETURN FOUND;
END
$$;

--
-- Name: tenantry_commit_step(text, uuid, bigint, text[], jsonb[], smallint[], jsonb[], integer, bigint, bigint, bigint, double precision, jsonb, jsonb, jsonb, jsonb); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.tenantry_commit_step(p_tenant text, p_run uuid, p_epoch bigint, p_types text[], p_data jsonb[], p_formats smallint[], p_payloads jsonb[], p_steps integer, p_input_tokens bigint, p_output_tokens bigint, p_cost bigint, p_lease_seconds double precision, p_audit jsonb, p_settle jsonb, p_usage jsonb, p_terminal jsonb, OUT last_seq integer, OUT cancel_requested boolean, OUT hand_back boolean) RETURNS record
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'public'
    AS $$
DECLARE
    v_count integer := cardinality(p_types);
    v_first integer;
BEGIN
    PERFORM set_config('tenantry.tenant_id', p_tenant, true);
    -- The counter row hands out the slots under its row lock (never max(seq)+1); the same
    -- update renews the lease and adds the step to the run's totals.
    UPDATE public.runs r SET
        last_seq = r.last_seq + v_count,
        steps = r.steps + p_steps,
        input_tokens = r.input_tokens + p_input_tokens,
        output_tokens = r.output_tokens + p_output_tokens,
        cost_micros = r.cost_micros + p_cost,
        lease_expires_at = CASE WHEN p_terminal IS NULL
                                THEN now() + make_interval(secs => p_lease_seconds)
                                ELSE r.lease_expires_at END,
        updated_at = now()
    WHERE r.tenant_id = p_tenant AND r.run_id = p_run AND r.lease_epoch = p_epoch
      AND (p_terminal IS NOT NULL OR r.status = 'running')
    RETURNING r.last_seq, r.cancel_requested INTO last_seq, cancel_requested;
    IF NOT FOUND THEN
        RETURN;  -- not ours any more: nothing written
    END IF;
    v_first := last_seq - v_count + 1;

    INSERT INTO public.run_events (tenant_id, run_id, seq, type, data, format)
    SELECT p_tenant, p_run, v_first + e.i - 1, e.type, e.data, e.format
    FROM unnest(p_types, p_data, p_formats) WITH ORDINALITY AS e(type, data, format, i);
    IF p_payloads IS NOT NULL THEN
        INSERT INTO public.run_event_payloads (tenant_id, run_id, seq, data)
        SELECT p_tenant, p_run, v_first + e.i - 1, e.data
        FROM unnest(p_payloads) WITH ORDINALITY AS e(data, i)
        WHERE e.data IS NOT NULL;
    END IF;

    IF p_audit IS NOT NULL THEN
        INSERT INTO public.audit_log (tenant_id, audit_id, run_id, tool, server, key,
                                      arguments_sha256, outcome, detail, duration_ms)
        VALUES (p_tenant, (p_audit->>'audit_id')::uuid, p_run, p_audit->>'tool',
                p_audit->>'server', p_audit->>'key',
                decode(p_audit->>'arguments_sha256', 'hex'), p_audit->>'outcome',
                p_audit->>'detail', (p_audit->>'duration_ms')::double precision);
    END IF;

    IF p_settle IS NOT NULL THEN
        -- The reservation is settled, and the billing fact written, with the reply that
        -- consumed it: both commit or neither does.
        IF NOT public.tenantry_close_reservation(
                p_tenant, p_run, p_epoch, (p_settle->>'reservation_id')::uuid, 'settled',
                (p_settle->>'tokens')::bigint, (p_settle->>'cost_micros')::bigint) THEN
            RAISE EXCEPTION 'the budget reservation is no longer this owner''s to settle'
                USING ERRCODE = 'TR010';
        END IF;
    END IF;
    IF p_usage IS NOT NULL THEN
        INSERT INTO public.usage_facts (tenant_id, run_id, seq, agent_id, agent_version,
                                        provider, account, model, input_tokens,
                                        cached_input_tokens, cache_write_input_tokens,
                                        output_tokens, cost_micros, price_version,
                                        account_owner)
        VALUES (p_tenant, p_run, last_seq, (p_usage->>'agent_id')::uuid,
                (p_usage->>'agent_version')::integer, p_usage->>'provider',
                p_usage->>'account', p_usage->>'model',
                (p_usage->>'input_tokens')::bigint, (p_usage->>'cached_input_tokens')::bigint,
                (p_usage->>'cache_write_input_tokens')::bigint,
                (p_usage->>'output_tokens')::bigint, (p_usage->>'cost_micros')::bigint,
                p_usage->>'price_version', p_usage->>'account_owner');
    END IF;

    IF p_terminal IS NOT NULL THEN
        -- A run with a webhook gets its delivery queued in the same transaction (outbox).
        UPDATE public.runs r SET
            -- JSON null is what the caller's None became: stored as NULL, as before.
            status = p_terminal->>'status',
            answer = nullif(p_terminal->'answer', 'null'::jsonb),
            error = nullif(p_terminal->'error', 'null'::jsonb),
            finished_at = now(), updated_at = now(),
            lease_owner = NULL, lease_expires_at = NULL,
            webhook_state = CASE WHEN r.webhook_url IS NULL THEN NULL ELSE 'pending' END,
            webhook_next_at = CASE WHEN r.webhook_url IS NULL THEN NULL ELSE now() END
        WHERE r.tenant_id = p_tenant AND r.run_id = p_run;
        -- The one change from 0029: a run's end folds its tenant's closed reservations
        -- into the budget row (the run's own settlements all committed before this), so
        -- when a tenant's runs have ended its row is exact again. Last, so the row lock is
        -- held only to the commit; no lock at all when nothing waits to be folded.
        PERFORM 1 FROM public.budget_reservations b
        WHERE b.tenant_id = p_tenant AND b.unfolded LIMIT 1;
        IF FOUND THEN
            PERFORM public.tenantry_fold_closings(p_tenant);
        END IF;
    ELSIF EXISTS (SELECT 1 FROM public.frozen_tenants f WHERE f.tenant_id = p_tenant) THEN
        -- The tenant is being moved: the run goes back to the queue between two steps
        -- (its log complete up to here), under a new epoch so nothing more of this
        -- owner's lands; the move copies it once no run of the tenant holds a lease.
        UPDATE public.runs r SET status = 'queued', lease_owner = NULL,
            lease_expires_at = NULL, lease_epoch = r.lease_epoch + 1, updated_at = now()
        WHERE r.tenant_id = p_tenant AND r.run_id = p_run;
        hand_back := true;
        RETURN;
    END IF;
    hand_back := false;
END
$$;

--
-- Name: tenantry_commit_step_v2(text, uuid, bigint, text[], jsonb[], smallint[], jsonb[], integer, bigint, bigint, bigint, double precision, jsonb, jsonb, jsonb, jsonb); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.tenantry_commit_step_v2(p_tenant text, p_run uuid, p_epoch bigint, p_types text[], p_data jsonb[], p_formats smallint[], p_payloads jsonb[], p_steps integer, p_input_tokens bigint, p_output_tokens bigint, p_cost bigint, p_lease_seconds double precision, p_audit jsonb, p_settle jsonb, p_usage jsonb, p_terminal jsonb, OUT last_seq integer, OUT cancel_requested boolean, OUT hand_back boolean) RETURNS record
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'public'
    AS $$
DECLARE
    v_count integer := cardinality(p_types);
    v_first integer;
    v_agent uuid;
BEGIN
    PERFORM set_config('tenantry.tenant_id', p_tenant, true);
    -- The counter row hands out the slots under its row lock (never max(seq)+1); the same
    -- update renews the lease and adds the step to the run's totals.
    UPDATE public.runs r SET
        last_seq = r.last_seq + v_count,
        steps = r.steps + p_steps,
        input_tokens = r.input_tokens + p_input_tokens,
        output_tokens = r.output_tokens + p_output_tokens,
        cost_micros = r.cost_micros + p_cost,
        lease_expires_at = CASE WHEN p_terminal IS NULL
                                THEN now() + make_interval(secs => p_lease_seconds)
                                ELSE r.lease_expires_at END,
        updated_at = now()
    WHERE r.tenant_id = p_tenant AND r.run_id = p_run AND r.lease_epoch = p_epoch
      AND (p_terminal IS NOT NULL OR r.status = 'running')
    RETURNING r.last_seq, r.cancel_requested, r.agent_id
        INTO last_seq, cancel_requested, v_agent;
    IF NOT FOUND THEN
        RETURN;  -- not ours any more: nothing written
    END IF;
    v_first := last_seq - v_count + 1;

    INSERT INTO public.run_events (tenant_id, run_id, seq, type, data, format)
    SELECT p_tenant, p_run, v_first + e.i - 1, e.type, e.data, e.format
    FROM unnest(p_types, p_data, p_formats) WITH ORDINALITY AS e(type, data, format, i);
    IF p_payloads IS NOT NULL THEN
        INSERT INTO public.run_event_payloads (tenant_id, run_id, seq, data)
        SELECT p_tenant, p_run, v_first + e.i - 1, e.data
        FROM unnest(p_payloads) WITH ORDINALITY AS e(data, i)
        WHERE e.data IS NOT NULL;
    END IF;

    IF p_audit IS NOT NULL THEN
        INSERT INTO public.audit_log (tenant_id, audit_id, run_id, tool, server, key,
                                      arguments_sha256, outcome, detail, duration_ms)
        VALUES (p_tenant, (p_audit->>'audit_id')::uuid, p_run, p_audit->>'tool',
                p_audit->>'server', p_audit->>'key',
                decode(p_audit->>'arguments_sha256', 'hex'), p_audit->>'outcome',
                p_audit->>'detail', (p_audit->>'duration_ms')::double precision);
    END IF;

    IF p_settle IS NOT NULL THEN
        -- The reservation is settled, and the billing fact written, with the reply that
        -- consumed it: both commit or neither does.
        IF NOT public.tenantry_close_reservation(
                p_tenant, p_run, p_epoch, (p_settle->>'reservation_id')::uuid, 'settled',
                (p_settle->>'tokens')::bigint, (p_settle->>'cost_micros')::bigint) THEN
            RAISE EXCEPTION 'the budget reservation is no longer this owner''s to settle'
                USING ERRCODE = 'TR010';
        END IF;
    END IF;
    IF p_usage IS NOT NULL THEN
        INSERT INTO public.usage_facts (tenant_id, run_id, seq, agent_id, agent_version,
                                        provider, account, model, input_tokens,
                                        cached_input_tokens, cache_write_input_tokens,
                                        output_tokens, cost_micros, price_version,
                                        account_owner)
        VALUES (p_tenant, p_run, last_seq, (p_usage->>'agent_id')::uuid,
                (p_usage->>'agent_version')::integer, p_usage->>'provider',
                p_usage->>'account', p_usage->>'model',
                (p_usage->>'input_tokens')::bigint, (p_usage->>'cached_input_tokens')::bigint,
                (p_usage->>'cache_write_input_tokens')::bigint,
                (p_usage->>'output_tokens')::bigint, (p_usage->>'cost_micros')::bigint,
                p_usage->>'price_version', p_usage->>'account_owner');
    END IF;

    IF p_terminal IS NOT NULL THEN
        -- A run with a webhook gets its delivery queued in the same transaction (outbox).
        UPDATE public.runs r SET
            -- JSON null is what the caller's None became: stored as NULL, as before.
            status = p_terminal->>'status',
            answer = nullif(p_terminal->'answer', 'null'::jsonb),
            error = nullif(p_terminal->'error', 'null'::jsonb),
            finished_at = now(), updated_at = now(),
            lease_owner = NULL, lease_expires_at = NULL,
            webhook_state = CASE WHEN r.webhook_url IS NULL THEN NULL ELSE 'pending' END,
            webhook_next_at = CASE WHEN r.webhook_url IS NULL THEN NULL ELSE now() END
        WHERE r.tenant_id = p_tenant AND r.run_id = p_run;
        -- The tenant's endpoints (at most 10, found by an index on tenant_id): nothing
        -- to insert and one index probe for a tenant without any. A delivery already queued
        -- (a terminal commit made again under the same epoch) stays as it is: never an
        -- error that would fail the run's end.
        INSERT INTO public.endpoint_deliveries (tenant_id, run_id, endpoint_id, next_at)
        SELECT p_tenant, p_run, w.endpoint_id, now() FROM public.webhook_endpoints w
        WHERE w.tenant_id = p_tenant
          AND (w.statuses IS NULL OR p_terminal->>'status' = ANY (w.statuses))
          AND (w.agent_ids IS NULL OR v_agent = ANY (w.agent_ids))
        ON CONFLICT DO NOTHING;
        -- The one change from 0029: a run's end folds its tenant's closed reservations
        -- into the budget row (the run's own settlements all committed before this), so
        -- when a tenant's runs have ended its row is exact again. Last, so the row lock is
        -- held only to the commit; no lock at all when nothing waits to be folded.
        PERFORM 1 FROM public.budget_reservations b
        WHERE b.tenant_id = p_tenant AND b.unfolded LIMIT 1;
        IF FOUND THEN
            PERFORM public.tenantry_fold_closings(p_tenant);
        END IF;
    ELSIF EXISTS (SELECT 1 FROM public.frozen_tenants f WHERE f.tenant_id = p_tenant) THEN
        -- The tenant is being moved: the run goes back to the queue between two steps
        -- (its log complete up to here), under a new epoch so nothing more of this
        -- owner's lands; the move copies it once no run of the tenant holds a lease.
        UPDATE public.runs r SET status = 'queued', lease_owner = NULL,
            lease_expires_at = NULL, lease_epoch = r.lease_epoch + 1, updated_at = now()
        WHERE r.tenant_id = p_tenant AND r.run_id = p_run;
        hand_back := true;
        RETURN;
    END IF;
    hand_back := false;
END
$$;

--
-- Name: tenantry_console_actions(text, bigint, integer); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.tenantry_console_actions(p_tenant text, p_before bigint, p_limit integer) RETURNS TABLE(action_id bigint, at timestamp with time zone, actor text, action text, tenant_id text, target text, outcome text, detail text)
    LANGUAGE sql STABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'public'
    AS $$
    SELECT a.action_id, a.at, a.actor, a.action, a.tenant_id, a.target, a.outcome, a.detail
    FROM public.console_actions a
    WHERE (p_tenant IS NULL OR a.tenant_id = p_tenant)
      AND (p_before IS NULL OR a.action_id < p_before)
    ORDER BY a.action_id DESC
    LIMIT least(greatest(p_limit, 1), 200)
$$;

--
-- Name: tenantry_console_dead_letters(text, uuid, integer); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.tenantry_console_dead_letters(p_tenant text, p_before uuid, p_limit integer) RETURNS TABLE(tenant_id text, tenant_name text, plan text, run_id uuid, activity text, version integer, error jsonb, created_at timestamp with time zone, updated_at timestamp with time zone)
    LANGUAGE sql STABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'public'
    AS $$
    SELECT r.tenant_id, t.name, t.plan, r.run_id, a.name, r.agent_version, r.error,
           r.created_at, r.updated_at
    FROM public.runs r
    JOIN public.tenants t ON t.tenant_id = r.tenant_id
    JOIN public.agents a ON a.tenant_id = r.tenant_id AND a.agent_id = r.agent_id
    WHERE r.status = 'waiting' AND r.kind = 'activity'
      AND coalesce((r.error->>'dead_lettered')::boolean, false)
      AND (p_tenant IS NULL OR r.tenant_id = p_tenant)
      AND (p_before IS NULL OR r.run_id < p_before)
    ORDER BY r.run_id DESC
    LIMIT least(greatest(p_limit, 1), 200)
$$;

--
-- Name: tenantry_console_erase_job(uuid); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.tenantry_console_erase_job(p_job uuid) RETURNS TABLE(job_id uuid, tenant_id text, status text, runs_total bigint, runs_deleted bigint, runs_cancelled bigint, secrets_deleted integer, tool_servers_deleted integer, blobs_queued bigint, requested_by text, created_at timestamp with time zone, finished_at timestamp with time zone, runs_left bigint)
    LANGUAGE sql STABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'public'
    AS $$
    SELECT j.job_id, j.tenant_id, j.status, j.runs_total, j.runs_deleted, j.runs_cancelled,
           j.secrets_deleted, j.tool_servers_deleted, j.blobs_queued, j.requested_by,
           j.created_at, j.finished_at,
           (SELECT count(*) FROM public.runs r WHERE r.tenant_id = j.tenant_id)
    FROM public.erase_jobs j WHERE j.job_id = p_job
$$;

--
-- Name: tenantry_console_flagged_versions(text[]); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.tenantry_console_flagged_versions(p_tenants text[]) RETURNS TABLE(tenant_id text, agent_id uuid, name text, version integer, refused_egress bigint, reason text, flagged_at timestamp with time zone)
    LANGUAGE sql STABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'public'
    AS $$
    SELECT f.tenant_id, f.agent_id, a.name, f.version, f.refused_egress, f.reason,
           f.flagged_at
    FROM public.agent_version_flags f
    JOIN public.agents a ON a.tenant_id = f.tenant_id AND a.agent_id = f.agent_id
    WHERE f.tenant_id = ANY (p_tenants) AND f.flagged_at IS NOT NULL
    ORDER BY f.tenant_id, f.flagged_at DESC
$$;

--
-- Name: tenantry_console_pending_approvals(uuid, integer); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.tenantry_console_pending_approvals(p_after uuid, p_limit integer) RETURNS TABLE(tenant_id text, approval_id uuid, run_id uuid, key text, tool text, arguments jsonb, requested_at timestamp with time zone, expires_at timestamp with time zone)
    LANGUAGE sql STABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'public'
    AS $$
    SELECT a.tenant_id, a.approval_id, a.run_id, a.key, a.tool, a.arguments,
           a.requested_at, a.expires_at
    FROM public.approvals a
    WHERE a.status = 'pending' AND (p_after IS NULL OR a.approval_id > p_after)
    ORDER BY a.approval_id
    LIMIT least(greatest(p_limit, 1), 200)
$$;

--
-- Name: tenantry_console_pending_approvals_of(text, uuid, integer); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.tenantry_console_pending_approvals_of(p_tenant text, p_after uuid, p_limit integer) RETURNS TABLE(tenant_id text, approval_id uuid, run_id uuid, key text, tool text, arguments jsonb, requested_at timestamp with time zone, expires_at timestamp with time zone)
    LANGUAGE sql STABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'public'
    AS $$
    SELECT a.tenant_id, a.approval_id, a.run_id, a.key, a.tool, a.arguments,
           a.requested_at, a.expires_at
    FROM public.approvals a
    WHERE a.tenant_id = p_tenant AND a.status = 'pending'
      AND (p_after IS NULL OR a.approval_id > p_after)
    ORDER BY a.approval_id
    LIMIT least(greatest(p_limit, 1), 200)
$$;

--
-- Name: tenantry_console_pending_by_tenant(integer, integer); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.tenantry_console_pending_by_tenant(p_tenants integer, p_each integer) RETURNS TABLE(tenant_id text, pending bigint, oldest timestamp with time zone, approval_id uuid, run_id uuid, key text, tool text, arguments jsonb, requested_at timestamp with time zone, expires_at timestamp with time zone)
    LANGUAGE sql STABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'public'
    AS $$
    WITH waiting AS (
        SELECT a.tenant_id, count(*) AS pending, min(a.requested_at) AS oldest
        FROM public.approvals a
        WHERE a.status = 'pending'
        GROUP BY a.tenant_id
        ORDER BY oldest, a.tenant_id
        LIMIT least(greatest(p_tenants, 1), 200)
    )
    SELECT w.tenant_id, w.pending, w.oldest, f.approval_id, f.run_id, f.key, f.tool,
           f.arguments, f.requested_at, f.expires_at
    FROM waiting w
    CROSS JOIN LATERAL (
        SELECT a.approval_id, a.run_id, a.key, a.tool, a.arguments, a.requested_at,
               a.expires_at
        FROM public.approvals a
        WHERE a.tenant_id = w.tenant_id AND a.status = 'pending'
        ORDER BY a.approval_id
        LIMIT least(greatest(p_each, 1), 50)
    ) f
    ORDER BY w.oldest, w.tenant_id, f.approval_id
$$;

--
-- Name: tenantry_console_record_action(text, text, text, text, text, text); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.tenantry_console_record_action(p_actor text, p_action text, p_tenant text, p_target text, p_outcome text, p_detail text) RETURNS bigint
    LANGUAGE sql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'public'
    AS $$
    INSERT INTO public.console_actions (actor, action, tenant_id, target, outcome, detail)
    VALUES (p_actor, p_action, p_tenant, p_target, left(p_outcome, 500), left(p_detail, 2000))
    RETURNING action_id
$$;

--
-- Name: tenantry_console_releases(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.tenantry_console_releases() RETURNS TABLE(kind text, name text, detail text, n bigint)
    LANGUAGE sql STABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'public'
    AS $$
    SELECT 'connection', a.application_name, NULL::text, count(*) FROM pg_stat_activity a
    WHERE a.datname = current_database()
      AND coalesce(a.backend_type, 'client backend') = 'client backend'
    GROUP BY a.application_name
    UNION ALL
    SELECT 'worker', s.release, NULL, count(*) FROM public.worker_sessions s
    WHERE EXISTS (SELECT 1 FROM pg_locks l
                  WHERE l.locktype = 'advisory' AND l.classid = 1415008843
                    AND l.objid = s.lock_key::oid AND l.objsubid = 2
                    AND l.mode = 'ExclusiveLock' AND l.granted)
    GROUP BY s.release
    UNION ALL
    SELECT 'migration', m.version::text, m.sha256, 1 FROM public.schema_migrations m
    UNION ALL
    SELECT 'routine', r.name, r.sha256, 1 FROM public.schema_routines r
    UNION ALL
    SELECT 'contract', c.version::text, c.sha256, 1 FROM public.schema_contract_steps c
    UNION ALL
    SELECT 'release', v.release, v.contracted_at::text, 1 FROM public.schema_releases v
$$;

--
-- Name: tenantry_console_retention(text[]); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.tenantry_console_retention(p_tenants text[]) RETURNS TABLE(tenant_id text, runs_days integer, tombstones_days integer, erased_at timestamp with time zone)
    LANGUAGE sql STABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'public'
    AS $$
    SELECT t.tenant_id, p.runs_days, p.tombstones_days, t.erased_at
    FROM public.tenants t
    LEFT JOIN public.retention_policies p ON p.tenant_id = t.tenant_id
    WHERE t.tenant_id = ANY (p_tenants)
$$;

--
-- Name: tenantry_console_runs(text, text, uuid, uuid, integer); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.tenantry_console_runs(p_tenant text, p_status text, p_agent uuid, p_before uuid, p_limit integer) RETURNS TABLE(tenant_id text, run_id uuid, agent_id uuid, agent_version integer, status text, priority text, steps integer, input_tokens bigint, output_tokens bigint, cost_micros bigint, cancel_requested boolean, created_at timestamp with time zone, updated_at timestamp with time zone, finished_at timestamp with time zone)
    LANGUAGE sql STABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'public'
    AS $$
    SELECT r.tenant_id, r.run_id, r.agent_id, r.agent_version, r.status, r.priority,
           r.steps, r.input_tokens, r.output_tokens, r.cost_micros, r.cancel_requested,
           r.created_at, r.updated_at, r.finished_at
    FROM public.runs r
    WHERE (p_tenant IS NULL OR r.tenant_id = p_tenant)
      AND (p_status IS NULL OR r.status = p_status)
      AND (p_agent IS NULL OR r.agent_id = p_agent)
      AND (p_before IS NULL OR r.run_id < p_before)
      AND r.kind = 'agent'
    ORDER BY r.run_id DESC
    LIMIT least(greatest(p_limit, 1), 200)
$$;

--
-- Name: tenantry_console_spend_capped(text[]); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.tenantry_console_spend_capped(p_tenants text[]) RETURNS TABLE(tenant_id text, runs bigint)
    LANGUAGE sql STABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'public'
    AS $$
    SELECT r.tenant_id, count(*) FROM public.runs r
    WHERE r.tenant_id = ANY (p_tenants) AND r.status = 'waiting'
      AND r.waiting_cap_micros IS NOT NULL
    GROUP BY r.tenant_id
$$;

--
-- Name: tenantry_console_tenants(text, integer); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.tenantry_console_tenants(p_after text, p_limit integer) RETURNS TABLE(tenant_id text, name text, plan text, region text, approval_ttl_seconds integer, weight integer, max_running integer, max_queued integer, tokens_per_minute bigint, monthly_spend_cap_micros bigint, policy_updated_at timestamp with time zone, queued integer, running integer, waiting integer, month_spend_micros bigint, reserved_micros bigint, bucket_tokens double precision, pending_approvals bigint)
    LANGUAGE sql STABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'public'
    AS $$
    SELECT t.tenant_id, t.name, t.plan, t.region, t.approval_ttl_seconds, p.weight,
           p.max_running, p.max_queued, p.tokens_per_minute, p.monthly_spend_cap_micros,
           p.updated_at, l.queued, l.running, l.waiting, public.tenantry_month_spend(b),
           (public.tenantry_budget_now(b)).reserved_micros,
           public.tenantry_bucket_level(public.tenantry_budget_now(b), p),
           (SELECT count(*) FROM public.approvals a
            WHERE a.tenant_id = t.tenant_id AND a.status = 'pending')
    FROM public.tenants t
    JOIN public.tenant_policies p ON p.tenant_id = t.tenant_id
    JOIN public.tenant_load l ON l.tenant_id = t.tenant_id
    JOIN public.tenant_budget b ON b.tenant_id = t.tenant_id
    WHERE p_after IS NULL OR t.tenant_id > p_after
    ORDER BY t.tenant_id
    LIMIT least(greatest(p_limit, 1), 200)
$$;

--
-- Name: tenantry_count_ended_runs(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.tenantry_count_ended_runs() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'public'
    AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        IF OLD.status IN ('finished', 'failed', 'cancelled') THEN
            UPDATE public.run_status_totals SET runs = runs - 1
            WHERE tenant_id = OLD.tenant_id AND status = OLD.status;
        END IF;
        RETURN NULL;
    END IF;
    IF NEW.status IN ('finished', 'failed', 'cancelled')
       AND OLD.status IS DISTINCT FROM NEW.status THEN
        INSERT INTO public.run_status_totals AS t (tenant_id, status, runs)
        VALUES (NEW.tenant_id, NEW.status, 1)
        ON CONFLICT (tenant_id, status) DO UPDATE SET runs = t.runs + 1;
    END IF;
    RETURN NULL;
END
$$;

--
-- Name: tenantry_count_inserted_runs(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.tenantry_count_inserted_runs() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'public'
    AS $$
BEGIN
    -- Tenants in id order: two multi-tenant inserts never wait for each other in a cycle.
    UPDATE public.tenant_load l SET
        queued  = l.queued  + n.queued,
        running = l.running + n.running,
        waiting = l.waiting + n.waiting
    FROM (SELECT i.tenant_id,
                 count(*) FILTER (WHERE i.status = 'queued')::int  AS queued,
                 count(*) FILTER (WHERE i.status = 'running')::int AS running,
                 count(*) FILTER (WHERE i.status = 'waiting')::int AS waiting
          FROM inserted i
          WHERE i.status IN ('queued', 'running', 'waiting')
          GROUP BY i.tenant_id ORDER BY i.tenant_id) n
    WHERE l.tenant_id = n.tenant_id;
    RETURN NULL;
END
$$;

--
-- Name: tenantry_count_runs(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.tenantry_count_runs() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'public'
    AS $$
DECLARE
    old_status text := CASE WHEN TG_OP = 'UPDATE' THEN OLD.status END;
BEGIN
    IF old_status IS NOT DISTINCT FROM NEW.status THEN
        RETURN NULL;
    END IF;
    UPDATE public.tenant_load SET
        queued  = queued  + (NEW.status = 'queued')::int
                          - (old_status IS NOT DISTINCT FROM 'queued')::int,
        running = running + (NEW.status = 'running')::int
                          - (old_status IS NOT DISTINCT FROM 'running')::int,
        waiting = waiting + (NEW.status = 'waiting')::int
                          - (old_status IS NOT DISTINCT FROM 'waiting')::int
    WHERE tenant_id = NEW.tenant_id;
    RETURN NULL;
END
$$;

--
-- Name: tenantry_create_runs(jsonb); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.tenantry_create_runs(p_groups jsonb) RETURNS TABLE(i integer, outcome text, run_id uuid, status text, detail jsonb)
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'public'
    AS $$
#variable_conflict use_column
DECLARE
    g jsonb;
    v_tenant text;
    r record;
    f record;
    lim record;
    v_live bigint;
    v_version integer;
    v_model text;
    v_pos integer;
    a_i integer[];
    a_run uuid[];
    a_agent uuid[];
    a_version integer[];
    a_input jsonb[];
    a_key text[];
    a_sha bytea[];
    a_webhook text[];
    a_priority text[];
    a_event jsonb[];
    a_replay text[];  -- an item answered by an earlier item of the batch: its key
    v_made uuid[];
BEGIN
    FOR g IN SELECT value FROM jsonb_array_elements(p_groups) LOOP
        v_tenant := g->>'tenant';
        PERFORM set_config('tenantry.tenant_id', v_tenant, true);
        a_i := '{}'; a_run := '{}'; a_agent := '{}'; a_version := '{}'; a_input := '{}';
        a_key := '{}'; a_sha := '{}'; a_webhook := '{}'; a_priority := '{}'; a_event := '{}';
        a_replay := '{}';
        -- The admission lock of lock_for_admission, taken once for the whole batch.
        SELECT l.queued + l.running + l.waiting AS live, p.max_queued,
               tenantry_month_spend(b) AS month_spend_micros, p.monthly_spend_cap_micros,
               t.erased_at, t.admissions_paused_at,
               EXISTS (SELECT 1 FROM frozen_tenants z WHERE z.tenant_id = l.tenant_id) AS moving
        INTO lim
        FROM tenant_load l JOIN tenant_policies p ON p.tenant_id = l.tenant_id
        JOIN tenant_budget b ON b.tenant_id = l.tenant_id
        JOIN tenants t ON t.tenant_id = l.tenant_id
        WHERE l.tenant_id = v_tenant
        FOR UPDATE OF l;
        v_live := lim.live;

        FOR r IN SELECT x.* FROM jsonb_to_recordset(g->'items') AS x(
                i integer, run_id uuid, agent_id uuid, version integer, input jsonb,
                key text, sha text, webhook text, priority text, shed boolean, event jsonb)
        LOOP
            IF r.key IS NOT NULL THEN
                v_pos := array_position(a_key, r.key);
                IF v_pos IS NOT NULL THEN
                    -- The same key earlier in this batch: answered with that item's run
                    -- (or a conflict, if the bodies differ) once it is inserted, below.
                    a_i := a_i || r.i; a_run := a_run || NULL::uuid;
                    a_agent := a_agent || NULL::uuid; a_version := a_version || NULL::int;
                    a_input := a_input || NULL::jsonb; a_key := a_key || NULL::text;
                    a_sha := a_sha || decode(r.sha, 'hex');
                    a_webhook := a_webhook || NULL::text;
                    a_priority := a_priority || NULL::text; a_event := a_event || NULL::jsonb;
                    a_replay := a_replay || r.key;
                    CONTINUE;
                END IF;
                SELECT k.run_id, k.request_sha256, k.status, k.deleted INTO f FROM (
                    SELECT x.run_id, x.request_sha256, x.status, false AS deleted FROM runs x
                    WHERE x.tenant_id = v_tenant AND x.idempotency_key = r.key
                    UNION ALL
                    SELECT y.run_id, NULL, y.status, true FROM tombstones y
                    WHERE y.tenant_id = v_tenant
                      AND y.idempotency_key_sha256 = sha256(convert_to(r.key, 'UTF8'))
                    LIMIT 1) k;
                IF FOUND THEN
                    i := r.i; run_id := f.run_id; status := f.status; detail := NULL;
                    outcome := CASE WHEN f.deleted THEN 'tombstoned'
                                    WHEN f.request_sha256 <> decode(r.sha, 'hex') THEN 'conflict'
                                    ELSE 'existing' END;
                    RETURN NEXT;
                    CONTINUE;
                END IF;
            END IF;
            i := r.i; run_id := NULL; status := NULL; detail := NULL;
            IF r.shed THEN
                outcome := 'overloaded'; RETURN NEXT; CONTINUE;
            END IF;
            IF lim.moving THEN  -- being moved to another cell: asked again shortly
                outcome := 'moving'; RETURN NEXT; CONTINUE;
            END IF;
            IF r.version IS NULL THEN
                SELECT v.version, v.spec->>'model' INTO v_version, v_model
                FROM agents a JOIN agent_versions v
                  ON v.tenant_id = a.tenant_id AND v.agent_id = a.agent_id
                 AND v.version = a.live_version
                WHERE a.tenant_id = v_tenant AND a.agent_id = r.agent_id;
                IF NOT FOUND THEN
                    outcome := 'agent_not_found'; RETURN NEXT; CONTINUE;
                END IF;
            ELSE
                SELECT v.version, v.spec->>'model' INTO v_version, v_model
                FROM agent_versions v JOIN agents a
                  ON a.tenant_id = v.tenant_id AND a.agent_id = v.agent_id
                WHERE v.tenant_id = v_tenant AND v.agent_id = r.agent_id
                  AND v.version = r.version;
                IF NOT FOUND THEN
                    outcome := 'version_not_found'; RETURN NEXT; CONTINUE;
                END IF;
            END IF;
            IF v_model IN ('activity', 'task') THEN
                outcome := 'not_runnable'; detail := jsonb_build_object('model', v_model);
                RETURN NEXT; CONTINUE;
            END IF;
            IF lim.erased_at IS NOT NULL THEN
                outcome := 'erased'; RETURN NEXT; CONTINUE;
            END IF;
            IF lim.admissions_paused_at IS NOT NULL THEN
                outcome := 'paused';
                detail := jsonb_build_object('paused_at', lim.admissions_paused_at);
                RETURN NEXT; CONTINUE;
            END IF;
            IF lim.max_queued IS NULL THEN  -- no load row at all, as admit() says
                outcome := 'no_policy'; RETURN NEXT; CONTINUE;
            END IF;
            IF v_live >= lim.max_queued THEN
                outcome := 'quota';
                detail := jsonb_build_object('limit_value', lim.max_queued, 'current', v_live);
                RETURN NEXT; CONTINUE;
            END IF;
            IF lim.monthly_spend_cap_micros IS NOT NULL
               AND lim.month_spend_micros >= lim.monthly_spend_cap_micros THEN
                outcome := 'budget';
                detail := jsonb_build_object('limit_value', lim.monthly_spend_cap_micros,
                                             'current', lim.month_spend_micros);
                RETURN NEXT; CONTINUE;
            END IF;
            v_live := v_live + 1;
            a_i := a_i || r.i; a_run := a_run || r.run_id; a_agent := a_agent || r.agent_id;
            a_version := a_version || v_version; a_input := a_input || r.input;
            a_key := a_key || r.key; a_sha := a_sha || decode(r.sha, 'hex');
            a_webhook := a_webhook || r.webhook; a_priority := a_priority || r.priority;
            a_event := a_event || (r.event || jsonb_build_object('version', v_version));
            a_replay := a_replay || NULL::text;
        END LOOP;

        IF cardinality(a_i) = 0 THEN
            CONTINUE;
        END IF;
        -- Slot 1 is taken by RunCreated in the same transaction, hence last_seq = 1.
        WITH made AS (
            INSERT INTO runs AS n (tenant_id, run_id, agent_id, agent_version, input,
                                   idempotency_key, request_sha256, webhook_url, priority,
                                   kind, last_seq)
            SELECT v_tenant, u.run_id, u.agent_id, u.version, u.input, u.key, u.sha,
                   u.webhook, u.priority, 'agent', 1
            FROM unnest(a_run, a_agent, a_version, a_input, a_key, a_sha, a_webhook,
                        a_priority) AS u(run_id, agent_id, version, input, key, sha,
                                         webhook, priority)
            WHERE u.run_id IS NOT NULL
            ON CONFLICT (tenant_id, idempotency_key) DO NOTHING
            RETURNING n.run_id
        )
        SELECT coalesce(array_agg(made.run_id), '{}') INTO v_made FROM made;
        INSERT INTO run_events (tenant_id, run_id, seq, type, data, format)
        SELECT v_tenant, u.run_id, 1, 'RunCreated', u.event, 1
        FROM unnest(a_run, a_event) AS u(run_id, event)
        WHERE u.run_id = ANY (v_made);

        FOR v_pos IN 1 .. cardinality(a_i) LOOP
            i := a_i[v_pos]; detail := NULL;
            IF a_run[v_pos] IS NULL THEN
                -- a replay of an earlier item of this batch (or of the concurrent request
                -- that took its key)
                SELECT k.run_id, k.request_sha256, k.status INTO f FROM runs k
                WHERE k.tenant_id = v_tenant AND k.idempotency_key = a_replay[v_pos];
                run_id := f.run_id; status := f.status;
                outcome := CASE WHEN f.request_sha256 = a_sha[v_pos] THEN 'existing'
                                ELSE 'conflict' END;
            ELSIF a_run[v_pos] = ANY (v_made) THEN
                outcome := 'created'; run_id := a_run[v_pos]; status := 'queued';
            ELSE
                -- a concurrent request with the same key committed first
                SELECT k.run_id, k.request_sha256, k.status INTO f FROM runs k
                WHERE k.tenant_id = v_tenant AND k.idempotency_key = a_key[v_pos];
                run_id := f.run_id; status := f.status;
                outcome := CASE WHEN f.request_sha256 = a_sha[v_pos] THEN 'existing'
                                ELSE 'conflict' END;
            END IF;
            RETURN NEXT;
        END LOOP;
    END LOOP;
END
$$;

--
-- Name: tenantry_current_tenant(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.tenantry_current_tenant() RETURNS text
    LANGUAGE sql STABLE
    AS $$
    SELECT NULLIF(current_setting('tenantry.tenant_id', true), '')
$$;

--
-- Name: tenantry_dead_letter_gauge(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.tenantry_dead_letter_gauge() RETURNS TABLE(tenant_class text, dead_lettered bigint)
    LANGUAGE sql STABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'public'
    AS $$
    SELECT t.plan, count(r.run_id)
    FROM public.tenants t
    LEFT JOIN public.runs r
      ON r.tenant_id = t.tenant_id AND r.status = 'waiting' AND r.kind = 'activity'
     AND coalesce((r.error->>'dead_lettered')::boolean, false)
    GROUP BY t.plan
    ORDER BY t.plan
$$;

--
-- Name: tenantry_dead_workers(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.tenantry_dead_workers() RETURNS text[]
    LANGUAGE sql
    SET search_path TO 'pg_catalog', 'public'
    AS $$
    SELECT coalesce(array_agg(s.worker_id), '{}') FROM public.worker_sessions s
    WHERE pg_try_advisory_xact_lock_shared(1415008843, s.lock_key)
$$;

--
-- Name: tenantry_erase_tenant_state(text); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.tenantry_erase_tenant_state(p_tenant text) RETURNS TABLE(secrets integer, tool_servers integer)
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'public'
    AS $$
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
    UPDATE public.model_accounts SET enabled = false, updated_at = now()
    WHERE tenant_id = p_tenant AND enabled;
    -- Its people (their addresses are personal data), their links and sessions: gone.
    DELETE FROM public.app_sessions s WHERE s.tenant_id = p_tenant;
    DELETE FROM public.sign_in_links l WHERE l.tenant_id = p_tenant;
    DELETE FROM public.tenant_users u WHERE u.tenant_id = p_tenant;
    RETURN QUERY SELECT v_secrets, v_servers;
END
$$;

--
-- Name: tenantry_erase_tenant_state_v2(text); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.tenantry_erase_tenant_state_v2(p_tenant text) RETURNS TABLE(secrets integer, tool_servers integer)
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'public'
    AS $$
DECLARE
    v_secrets integer;
    v_servers integer;
BEGIN
    DELETE FROM public.secrets s WHERE s.tenant_id = p_tenant;
    GET DIAGNOSTICS v_secrets = ROW_COUNT;
    DELETE FROM public.tenant_keys k WHERE k.tenant_id = p_tenant;
    DELETE FROM public.tool_servers s WHERE s.tenant_id = p_tenant;
    GET DIAGNOSTICS v_servers = ROW_COUNT;
    -- Its webhook endpoints (ADR 0045), and with them the deliveries not yet made: the
    -- runs its erase cancels next are announced to no one.
    DELETE FROM public.webhook_endpoints w WHERE w.tenant_id = p_tenant;
    UPDATE public.api_keys SET revoked_at = coalesce(revoked_at, now())
    WHERE tenant_id = p_tenant;
    UPDATE public.model_accounts SET enabled = false, updated_at = now()
    WHERE tenant_id = p_tenant AND enabled;
    -- Its people (their addresses are personal data), their links and sessions: gone.
    DELETE FROM public.app_sessions s WHERE s.tenant_id = p_tenant;
    DELETE FROM public.sign_in_links l WHERE l.tenant_id = p_tenant;
    DELETE FROM public.tenant_users u WHERE u.tenant_id = p_tenant;
    RETURN QUERY SELECT v_secrets, v_servers;
END
$$;

--
-- Name: tenantry_expire_exports(text, text, bigint, boolean, integer); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.tenantry_expire_exports(p_tenant text, p_owner text, p_epoch bigint, p_all boolean, p_limit integer) RETURNS integer
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'public'
    AS $$
DECLARE
    v_gone integer;
BEGIN
    PERFORM 1 FROM public.cleanup_leases l
    WHERE l.tenant_id = p_tenant AND l.owner = p_owner AND l.epoch = p_epoch
      AND l.expires_at > clock_timestamp()
    FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'cleanup lease of tenant % epoch % is no longer held', p_tenant, p_epoch
            USING ERRCODE = 'TR001';
    END IF;
    WITH gone AS (
        DELETE FROM public.exports x WHERE (x.tenant_id, x.export_id) IN (
            SELECT y.tenant_id, y.export_id FROM public.exports y
            WHERE y.tenant_id = p_tenant
              AND (p_all OR (y.status IN ('ready', 'failed')
                             AND y.expires_at < clock_timestamp()))
            LIMIT p_limit)
        RETURNING x.archive_ref
    ), queued AS (
        INSERT INTO public.blob_deletions (tenant_id, ref, run_id)
        SELECT p_tenant, g.archive_ref, NULL FROM gone g WHERE g.archive_ref IS NOT NULL
        ON CONFLICT ON CONSTRAINT blob_deletions_pkey DO NOTHING
    )
    SELECT count(*) INTO v_gone FROM gone;
    RETURN v_gone;
END
$$;

--
-- Name: tenantry_expired_approvals(timestamp with time zone, integer); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.tenantry_expired_approvals(p_now timestamp with time zone, p_batch integer) RETURNS TABLE(tenant_id text, approval_id uuid)
    LANGUAGE sql STABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'public'
    AS $$
    SELECT a.tenant_id, a.approval_id FROM public.approvals a
    WHERE a.status = 'pending' AND a.expires_at <= p_now
      AND a.tenant_id <> ALL (public.tenantry_frozen_tenants())
    ORDER BY a.expires_at
    LIMIT p_batch
$$;

--
-- Name: tenantry_fold_closings(text); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.tenantry_fold_closings(p_tenant text) RETURNS public.tenant_budget
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'public'
    AS $$
DECLARE
    l public.tenant_budget;
    v_folded bigint;
    v_estimates bigint;
    v_costs bigint;
    v_back bigint;
BEGIN
    SELECT * INTO l FROM public.tenant_budget WHERE tenant_id = p_tenant FOR UPDATE;
    WITH folded AS (
        UPDATE public.budget_reservations r SET unfolded = false
        WHERE r.tenant_id = p_tenant AND r.unfolded
        RETURNING r.tokens, r.cost_micros, r.spent_tokens, r.spent_micros, r.closed_at,
                  r.counted
    )
    -- An uncounted reservation's estimate was never in the row, nor its tokens out of it.
    SELECT count(*), coalesce(sum(f.cost_micros) FILTER (WHERE f.counted), 0),
           coalesce(sum(f.spent_micros) FILTER (
               WHERE f.closed_at >= date_trunc('month', now())), 0),
           coalesce(sum(CASE WHEN f.counted THEN f.tokens ELSE 0 END - f.spent_tokens), 0)
    INTO v_folded, v_estimates, v_costs, v_back
    FROM folded f;
    l := public.tenantry_budget_with(l, v_estimates, v_costs, v_back);
    IF v_folded > 0 THEN
        UPDATE public.tenant_budget b SET
            bucket_tokens = l.bucket_tokens, spend_month = l.spend_month,
            spent_micros = l.spent_micros, reserved_micros = l.reserved_micros
        WHERE b.tenant_id = p_tenant;
    END IF;
    RETURN l;
END
$$;

--
-- Name: tenantry_forget_dead_workers(text[]); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.tenantry_forget_dead_workers(p_dead text[]) RETURNS void
    LANGUAGE sql
    SET search_path TO 'pg_catalog', 'public'
    AS $$
    DELETE FROM public.worker_sessions s
    WHERE s.worker_id IN (
        SELECT d.worker_id FROM public.worker_sessions d
        WHERE d.worker_id = ANY (p_dead)
          AND pg_try_advisory_xact_lock_shared(1415008843, d.lock_key)
          AND NOT EXISTS (SELECT 1 FROM public.runs r
                          WHERE r.lease_owner = d.worker_id AND r.status = 'running')
        ORDER BY d.worker_id
        FOR UPDATE SKIP LOCKED)
$$;

--
-- Name: tenantry_forget_spend_cap(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.tenantry_forget_spend_cap() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'public'
    AS $$
BEGIN
    NEW.waiting_cap_micros := NULL;
    IF NEW.available_at IS NOT DISTINCT FROM OLD.available_at THEN
        NEW.available_at := NULL;
    END IF;
    RETURN NEW;
END
$$;

--
-- Name: tenantry_frozen_changed(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.tenantry_frozen_changed() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'public'
    AS $$
BEGIN
    PERFORM pg_notify('tenantry_keys', '');
    IF TG_OP = 'DELETE' THEN
        PERFORM pg_notify('tenantry_runnable', '');
    END IF;
    RETURN NULL;
END
$$;

--
-- Name: tenantry_frozen_tenants(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.tenantry_frozen_tenants() RETURNS text[]
    LANGUAGE sql STABLE
    SET search_path TO 'pg_catalog', 'public'
    AS $$
    SELECT coalesce(array_agg(f.tenant_id), '{}') FROM public.frozen_tenants f
$$;

--
-- Name: tenantry_hold_spend_capped(integer); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.tenantry_hold_spend_capped(p_limit integer) RETURNS integer
    LANGUAGE sql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'public'
    AS $$
    WITH queued AS MATERIALIZED (
        SELECT DISTINCT r.tenant_id FROM public.runs r
        WHERE r.status = 'queued' AND r.steps > 0 AND r.kind = 'agent'
    ), over AS MATERIALIZED (
        SELECT q.tenant_id, p.monthly_spend_cap_micros AS cap,
               public.tenantry_month_spend(b) AS spent
        FROM queued q
        JOIN public.tenant_policies p ON p.tenant_id = q.tenant_id
        JOIN public.tenant_budget b ON b.tenant_id = q.tenant_id
        WHERE p.monthly_spend_cap_micros IS NOT NULL
          AND q.tenant_id <> ALL (public.tenantry_frozen_tenants())
    ), held AS (
        SELECT r.tenant_id, r.run_id, o.cap, o.spent FROM public.runs r
        JOIN over o ON o.tenant_id = r.tenant_id
        WHERE o.spent >= o.cap AND r.status = 'queued' AND r.steps > 0
          AND r.kind = 'agent' AND NOT r.cancel_requested
        ORDER BY r.tenant_id, r.run_id
        LIMIT p_limit
        FOR UPDATE OF r SKIP LOCKED
    ), parked AS (
        -- The event's slot from the run's counter, as every append takes one.
        UPDATE public.runs r
        SET status = 'waiting', waiting_cap_micros = h.cap,
            available_at = date_trunc('month', now()) + interval '1 month',
            last_seq = r.last_seq + 1, updated_at = now()
        FROM held h WHERE r.tenant_id = h.tenant_id AND r.run_id = h.run_id
        RETURNING r.tenant_id, r.run_id, r.last_seq, r.available_at, h.cap, h.spent
    ), logged AS (
        -- RunParked as the worker writes it (runs/waiting.py), less the decision's basis.
        INSERT INTO public.run_events (tenant_id, run_id, seq, type, data, format)
        SELECT k.tenant_id, k.run_id, k.last_seq, 'RunParked',
               jsonb_build_object(
                   'reason', 'monthly_spend_cap',
                   'until', to_char(k.available_at AT TIME ZONE 'UTC',
                                    'YYYY-MM-DD"T"HH24:MI:SS"+00:00"'),
                   'spent_micros', k.spent, 'cap_micros', k.cap), 1
        FROM parked k
        RETURNING 1
    )
    SELECT count(*)::integer FROM logged
$$;

--
-- Name: tenantry_keep_cleanup_lease(text, text, bigint, double precision, bigint); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.tenantry_keep_cleanup_lease(p_tenant text, p_owner text, p_epoch bigint, p_seconds double precision, p_deleted bigint) RETURNS boolean
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'public'
    AS $$
BEGIN
    UPDATE public.cleanup_leases SET
        expires_at = CASE WHEN p_seconds IS NULL THEN NULL
                          ELSE clock_timestamp() + make_interval(secs => p_seconds) END,
        owner = CASE WHEN p_seconds IS NULL THEN NULL ELSE owner END,
        last_pass_at = CASE WHEN p_seconds IS NULL THEN clock_timestamp() ELSE last_pass_at END,
        last_deleted = CASE WHEN p_seconds IS NULL THEN p_deleted ELSE last_deleted END
    WHERE tenant_id = p_tenant AND owner = p_owner AND epoch = p_epoch
      AND expires_at >= clock_timestamp()
      AND p_tenant <> ALL (public.tenantry_frozen_tenants());  -- a moving tenant's pass stops at once
    RETURN FOUND;
END
$$;

--
-- Name: tenant_load; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.tenant_load (
    tenant_id text NOT NULL,
    queued integer DEFAULT 0 NOT NULL,
    running integer DEFAULT 0 NOT NULL,
    waiting integer DEFAULT 0 NOT NULL,
    last_claim_at timestamp with time zone,
    CONSTRAINT tenant_load_queued_check CHECK ((queued >= 0)),
    CONSTRAINT tenant_load_running_check CHECK ((running >= 0)),
    CONSTRAINT tenant_load_waiting_check CHECK ((waiting >= 0))
);

--
-- Name: tenantry_may_claim(public.tenant_load, public.tenant_policies, public.tenant_budget); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.tenantry_may_claim(l public.tenant_load, p public.tenant_policies, b public.tenant_budget) RETURNS boolean
    LANGUAGE sql STABLE
    SET search_path TO 'pg_catalog', 'public'
    AS $$
    SELECT l.queued > 0 AND l.running < p.max_running
       AND (p.tokens_per_minute IS NULL OR public.tenantry_bucket_level(b, p) > 0)
       AND (p.monthly_spend_cap_micros IS NULL
            OR public.tenantry_month_spend(b) < p.monthly_spend_cap_micros)
$$;

--
-- Name: tenantry_month_spend(public.tenant_budget); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.tenantry_month_spend(b public.tenant_budget) RETURNS bigint
    LANGUAGE sql STABLE
    SET search_path TO 'pg_catalog', 'public'
    AS $$
    SELECT CASE WHEN n.spend_month < date_trunc('month', now())::date THEN n.reserved_micros
                ELSE n.spent_micros + n.reserved_micros END
    FROM public.tenantry_budget_now(b) n
$$;

--
-- Name: tenantry_new_tenant(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.tenantry_new_tenant() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'public'
    AS $$
BEGIN
    INSERT INTO public.tenant_policies (tenant_id) VALUES (NEW.tenant_id);
    INSERT INTO public.tenant_load (tenant_id) VALUES (NEW.tenant_id);
    INSERT INTO public.tenant_budget (tenant_id) VALUES (NEW.tenant_id);
    RETURN NULL;
END
$$;

--
-- Name: tenantry_note_model_snapshot(text, uuid, text, text); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.tenantry_note_model_snapshot(p_tenant text, p_agent uuid, p_model text, p_seen text) RETURNS boolean
    LANGUAGE sql
    SET search_path TO 'pg_catalog', 'public'
    AS $$
    SELECT public.tenantry_note_model_snapshot_v2(p_tenant, p_agent, p_model, p_seen, NULL)
$$;

--
-- Name: tenantry_note_model_snapshot_v2(text, uuid, text, text, text); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.tenantry_note_model_snapshot_v2(p_tenant text, p_agent uuid, p_model text, p_seen text, p_owner text) RETURNS boolean
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'public'
    AS $$
DECLARE
    r record;
    v_owners text[] := CASE WHEN p_owner IS NULL THEN '{}' ELSE ARRAY[p_owner] END;
BEGIN
    PERFORM set_config('tenantry.tenant_id', p_tenant, true);
    INSERT INTO public.agent_model_snapshots (tenant_id, agent_id, model, accepted,
                                              accepted_on)
    VALUES (p_tenant, p_agent, p_model, p_seen, v_owners)
    ON CONFLICT (tenant_id, agent_id, model) DO NOTHING;
    IF FOUND THEN
        RETURN false;  -- the first seen: accepted
    END IF;
    SELECT s.accepted, s.accepted_on, s.changed_to, s.changed_on INTO r
    FROM public.agent_model_snapshots s
    WHERE s.tenant_id = p_tenant AND s.agent_id = p_agent AND s.model = p_model
    FOR UPDATE;
    IF r.accepted = p_seen THEN
        IF NOT v_owners <@ r.accepted_on THEN
            UPDATE public.agent_model_snapshots
            SET accepted_on = r.accepted_on || v_owners, updated_at = now()
            WHERE tenant_id = p_tenant AND agent_id = p_agent AND model = p_model;
        END IF;
        RETURN false;
    END IF;
    IF r.changed_to = p_seen THEN
        IF NOT v_owners <@ r.changed_on THEN
            UPDATE public.agent_model_snapshots
            SET changed_on = r.changed_on || v_owners, updated_at = now()
            WHERE tenant_id = p_tenant AND agent_id = p_agent AND model = p_model;
        END IF;
        RETURN false;
    END IF;
    UPDATE public.agent_model_snapshots
    SET changed_to = p_seen, changed_at = now(), changed_on = v_owners, updated_at = now()
    WHERE tenant_id = p_tenant AND agent_id = p_agent AND model = p_model;
    RETURN true;
END
$$;

--
-- Name: tenantry_notify_event(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.tenantry_notify_event() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    PERFORM pg_notify('tenantry_events',
                      NEW.tenant_id || ' ' || NEW.run_id::text || ' ' || NEW.seq::text);
    RETURN NULL;
END
$$;

--
-- Name: tenantry_notify_inserted_runnable(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.tenantry_notify_inserted_runnable() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM inserted WHERE status = 'queued') THEN
        PERFORM pg_notify('tenantry_runnable', '');
    END IF;
    RETURN NULL;
END
$$;

--
-- Name: tenantry_notify_runnable(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.tenantry_notify_runnable() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    IF NEW.status = 'queued' THEN
        PERFORM pg_notify('tenantry_runnable', '');
    END IF;
    RETURN NULL;
END
$$;

--
-- Name: tenantry_operator_token_rotate(bytea, integer, text); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.tenantry_operator_token_rotate(p_new_hash bytea, p_overlap_seconds integer, p_by text) RETURNS timestamp with time zone
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'public'
    AS $$
DECLARE
    v_end timestamptz := now() + make_interval(secs => greatest(p_overlap_seconds, 0));
BEGIN
    PERFORM pg_advisory_xact_lock(hashtext('tenantry_operator_token_seed'));
    UPDATE public.operator_tokens t SET expires_at = least(coalesce(t.expires_at, v_end), v_end)
    WHERE t.expires_at IS NULL OR t.expires_at > now();
    INSERT INTO public.operator_tokens (token_hash, created_by) VALUES (p_new_hash, p_by);
    RETURN v_end;
END
$$;

--
-- Name: tenantry_operator_token_seed(bytea); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.tenantry_operator_token_seed(p_hash bytea) RETURNS boolean
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'public'
    AS $$
BEGIN
    -- One seed at a time: two replicas starting with a new token agree on the outcome.
    PERFORM pg_advisory_xact_lock(hashtext('tenantry_operator_token_seed'));
    IF NOT EXISTS (SELECT 1 FROM public.operator_tokens t WHERE t.token_hash = p_hash) THEN
        UPDATE public.operator_tokens t SET expires_at = now()
        WHERE t.expires_at IS NULL OR t.expires_at > now();
        INSERT INTO public.operator_tokens (token_hash, created_by)
        VALUES (p_hash, 'configuration');
    END IF;
    RETURN EXISTS (SELECT 1 FROM public.operator_tokens t
                   WHERE t.token_hash = p_hash
                     AND (t.expires_at IS NULL OR t.expires_at > now()));
END
$$;

--
-- Name: tenantry_operator_token_valid(bytea); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.tenantry_operator_token_valid(p_hash bytea) RETURNS TABLE(expires_at timestamp with time zone)
    LANGUAGE sql STABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'public'
    AS $$
    SELECT t.expires_at FROM public.operator_tokens t
    WHERE t.token_hash = p_hash AND (t.expires_at IS NULL OR t.expires_at > now())
$$;

--
-- Name: tenantry_parked_overdue(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.tenantry_parked_overdue() RETURNS TABLE(tenant_class text, overdue bigint, oldest_overdue_seconds double precision)
    LANGUAGE sql STABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'public'
    AS $$
    SELECT t.plan, count(r.run_id)::bigint,
           coalesce(extract(epoch FROM now() - min(r.available_at)), 0)::float8
    FROM public.tenants t
    LEFT JOIN public.runs r
        ON r.tenant_id = t.tenant_id AND r.status = 'waiting' AND r.parked_on IS NOT NULL
       AND r.available_at <= now()
       AND r.tenant_id <> ALL (public.tenantry_frozen_tenants())
    GROUP BY t.plan ORDER BY t.plan
$$;

--
-- Name: tenantry_queue_depth(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.tenantry_queue_depth() RETURNS bigint
    LANGUAGE sql STABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'public'
    AS $$
    SELECT coalesce(sum(queued), 0)::bigint FROM public.tenant_load
$$;

--
-- Name: tenantry_refuse_change(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.tenantry_refuse_change() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    RAISE EXCEPTION '% rows are immutable', TG_TABLE_NAME
        USING ERRCODE = 'restrict_violation';
END
$$;

--
-- Name: tenantry_refuse_change_but_retention(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.tenantry_refuse_change_but_retention() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    IF TG_OP = 'DELETE' AND tenantry_retention_under_way() THEN
        RETURN OLD;
    END IF;
    RAISE EXCEPTION '% rows are immutable', TG_TABLE_NAME
        USING ERRCODE = 'restrict_violation';
END
$$;

--
-- Name: tenantry_refuse_frozen(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.tenantry_refuse_frozen() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'public'
    AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM public.frozen_tenants f
               WHERE f.tenant_id = NEW.tenant_id AND f.state <> 'draining') THEN
        RAISE EXCEPTION 'tenant % is moving to another cell', NEW.tenant_id
            USING ERRCODE = 'TR020';
    END IF;
    RETURN NEW;
END
$$;

--
-- Name: tenantry_register_worker(text, integer, boolean); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.tenantry_register_worker(p_worker text, p_key integer, p_rejoin boolean) RETURNS text
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'public'
    AS $$
DECLARE
    v_by text;
BEGIN
    -- The release whose `tenantry migrate --contract` ran last (the owner's table: hence
    -- SECURITY DEFINER; it is read and nothing else).
    SELECT release INTO v_by FROM public.schema_releases
    WHERE contracted_at IS NOT NULL ORDER BY contracted_at DESC LIMIT 1;
    v_by := coalesce(v_by, '0.2.0');
    RAISE EXCEPTION USING MESSAGE = format(
        'this database was contracted by release %s (tenantry migrate --contract), which '
        'removed what releases before %s use: this is release 0.1.0; run a release the '
        'database serves (''tenantry migrate --status'' says which)',
        v_by, split_part(v_by, '.', 1) || '.' || split_part(v_by, '.', 2));
END
$$;

--
-- Name: tenantry_register_worker_v2(text, integer, boolean, text); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.tenantry_register_worker_v2(p_worker text, p_key integer, p_rejoin boolean, p_release text) RETURNS text
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'public'
    AS $$
DECLARE
    v_constraint text;
BEGIN
    IF NOT pg_try_advisory_lock(1415008843, p_key) THEN
        RETURN 'key_taken';
    END IF;
    BEGIN
        IF p_rejoin THEN
            INSERT INTO public.worker_sessions (worker_id, lock_key, release)
            VALUES (p_worker, p_key, p_release)
            ON CONFLICT (worker_id) DO UPDATE
                SET lock_key = EXCLUDED.lock_key, locked_at = now(),
                    release = EXCLUDED.release;
        ELSE
            INSERT INTO public.worker_sessions (worker_id, lock_key, release)
            VALUES (p_worker, p_key, p_release);
        END IF;
    EXCEPTION WHEN unique_violation THEN
        -- A session lock is not undone by the rollback of this block: let it go by hand.
        GET STACKED DIAGNOSTICS v_constraint = CONSTRAINT_NAME;
        PERFORM pg_advisory_unlock(1415008843, p_key);
        RETURN CASE WHEN v_constraint = 'worker_sessions_pkey' THEN 'id_taken'
                    ELSE 'key_taken' END;
    END;
    RETURN 'registered';
END
$$;

--
-- Name: tenantry_renew_leases(text, text[], uuid[], bigint[], double precision); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.tenantry_renew_leases(p_worker text, p_tenants text[], p_runs uuid[], p_epochs bigint[], p_lease_seconds double precision) RETURNS TABLE(tenant_id text, run_id uuid)
    LANGUAGE sql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'public'
    AS $$
    UPDATE public.runs r
    SET lease_expires_at = now() + make_interval(secs => p_lease_seconds)
    FROM unnest(p_tenants, p_runs, p_epochs) AS held(tenant_id, run_id, epoch)
    WHERE r.tenant_id = held.tenant_id AND r.run_id = held.run_id
      AND r.lease_epoch = held.epoch AND r.lease_owner = p_worker AND r.status = 'running'
    RETURNING r.tenant_id, r.run_id
$$;

--
-- Name: tenantry_reserve(text, uuid, bigint, uuid, bigint, bigint); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.tenantry_reserve(p_tenant text, p_run uuid, p_epoch bigint, p_reservation uuid, p_tokens bigint, p_cost bigint, OUT outcome text, OUT wait_seconds double precision, OUT spent bigint, OUT cap bigint) RETURNS record
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'public'
    AS $$
DECLARE
    l public.tenant_budget;
    p public.tenant_policies;
    v_level double precision;
    v_need double precision;
BEGIN
    PERFORM 1 FROM public.runs r
    WHERE r.tenant_id = p_tenant AND r.run_id = p_run AND r.lease_epoch = p_epoch
      AND r.status = 'running';
    IF NOT FOUND THEN
        outcome := 'lease_lost';
        RETURN;
    END IF;
    SELECT * INTO p FROM public.tenant_policies WHERE tenant_id = p_tenant;
    IF p.monthly_spend_cap_micros IS NULL AND p.tokens_per_minute IS NULL THEN
        INSERT INTO public.budget_reservations
            (tenant_id, reservation_id, run_id, lease_epoch, tokens, cost_micros, counted)
        VALUES (p_tenant, p_reservation, p_run, p_epoch, p_tokens, p_cost, false);
        outcome := 'ok';
        RETURN;
    END IF;
    -- Folded, with the month rolled over: what it says is exact (closings that commit
    -- after this point count at their estimate, as they did before they closed).
    l := public.tenantry_fold_closings(p_tenant);
    spent := l.spent_micros + l.reserved_micros;
    cap := p.monthly_spend_cap_micros;
    IF cap IS NOT NULL AND spent + p_cost > cap THEN
        outcome := 'over_cap';
        RETURN;
    END IF;
    v_level := public.tenantry_bucket_level(l, p);
    IF v_level IS NOT NULL THEN
        -- A call larger than a minute's worth waits for a full bucket, then goes.
        v_need := least(p_tokens::float8, p.tokens_per_minute::float8);
        IF v_level < v_need THEN
            outcome := 'wait';
            wait_seconds := (v_need - v_level) * 60.0 / p.tokens_per_minute;
            RETURN;
        END IF;
    END IF;
    UPDATE public.tenant_budget SET
        bucket_tokens = CASE WHEN v_level IS NULL THEN NULL ELSE v_level - p_tokens END,
        bucket_at = now(), spend_month = l.spend_month, spent_micros = l.spent_micros,
        reserved_micros = l.reserved_micros + p_cost
    WHERE tenant_id = p_tenant;
    INSERT INTO public.budget_reservations
        (tenant_id, reservation_id, run_id, lease_epoch, tokens, cost_micros)
    VALUES (p_tenant, p_reservation, p_run, p_epoch, p_tokens, p_cost);
    outcome := 'ok';
END
$$;

--
-- Name: tenantry_reserve_step(text, uuid, bigint, uuid, bigint, bigint); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.tenantry_reserve_step(p_tenant text, p_run uuid, p_epoch bigint, p_reservation uuid, p_tokens bigint, p_cost bigint, OUT outcome text, OUT wait_seconds double precision, OUT spent bigint, OUT cap bigint) RETURNS record
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'public'
    AS $$
BEGIN
    PERFORM set_config('tenantry.tenant_id', p_tenant, true);
    SELECT r.outcome, r.wait_seconds, r.spent, r.cap INTO outcome, wait_seconds, spent, cap
    FROM public.tenantry_reserve(p_tenant, p_run, p_epoch, p_reservation, p_tokens,
                                 p_cost) r;
END
$$;

--
-- Name: tenantry_retention_batch(text, text, bigint, timestamp with time zone, integer, text, uuid, boolean); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.tenantry_retention_batch(p_tenant text, p_owner text, p_epoch bigint, p_cutoff timestamp with time zone, p_limit integer, p_reason text, p_run uuid DEFAULT NULL::uuid, p_blobs boolean DEFAULT true) RETURNS TABLE(runs integer, events bigint, blobs integer)
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'public'
    SET plan_cache_mode TO 'force_generic_plan'
    AS $_$
DECLARE
    v_runs uuid[];
    v_statuses text[];
    v_events bigint;
    v_blobs integer := 0;
    v_was text := coalesce(current_setting('tenantry.retention', true), '');
BEGIN
    PERFORM set_config('tenantry.retention', 'on', true);
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
        PERFORM set_config('tenantry.retention', v_was, true);
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
            -- Every blob written since the registry (migration 0048) is a row of its run.
            SELECT x.run_id, x.ref FROM public.blobs x
            WHERE x.tenant_id = p_tenant AND x.run_id = ANY (v_runs)
            UNION ALL
            -- Blobs from before it, named by their events. An event over 8 KiB keeps its
            -- fields in run_event_payloads (its row says only {"$payload": n}): read there.
            SELECT e.run_id, r.ref FROM public.run_events e
            LEFT JOIN public.run_event_payloads p
              ON p.tenant_id = e.tenant_id AND p.run_id = e.run_id AND p.seq = e.seq
            CROSS JOIN LATERAL (SELECT coalesce(p.data, e.data) AS data) d
            CROSS JOIN LATERAL (
                SELECT d.data->>'output_ref' AS ref WHERE e.type = 'ToolCompleted'
                UNION ALL
                SELECT d.data->>'ref' WHERE e.type = 'SandboxSaved'
                UNION ALL
                -- What a call stored besides its output (a browser's screenshots).
                SELECT jsonb_array_elements_text(d.data->'blob_refs')
                WHERE e.type = 'ToolCompleted'
                  AND jsonb_typeof(d.data->'blob_refs') = 'array'
            ) r
            WHERE e.tenant_id = p_tenant AND e.run_id = ANY (v_runs)
              AND e.type IN ('ToolCompleted', 'SandboxSaved')
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
    -- Copies of the run's input and tool results in test cases made from it, and the
    -- verdicts stored for it as an evaluation's run (ADR 0034): they go with the run.
    DELETE FROM public.test_case_sources s
    WHERE s.tenant_id = p_tenant AND s.run_id = ANY (v_runs);
    DELETE FROM public.evaluation_results x
    WHERE x.tenant_id = p_tenant AND x.run_id = ANY (v_runs);
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
    PERFORM set_config('tenantry.retention', v_was, true);
    RETURN QUERY SELECT cardinality(v_runs), v_events, v_blobs;
END
$_$;

--
-- Name: tenantry_retention_expire(text, text, bigint, timestamp with time zone, timestamp with time zone, integer); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.tenantry_retention_expire(p_tenant text, p_owner text, p_epoch bigint, p_tombstones_before timestamp with time zone, p_audit_before timestamp with time zone, p_limit integer) RETURNS TABLE(tombstones integer, audit integer)
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'public'
    AS $$
DECLARE
    v_tombstones integer := 0;
    v_audit integer := 0;
    v_changes integer := 0;
    -- The immutability triggers' exemption for this call only, as tenantry_retention_batch
    -- sets it (not a SET clause: that needs SET privilege on the parameter on PostgreSQL 15).
    v_was text := coalesce(current_setting('tenantry.retention', true), '');
BEGIN
    PERFORM set_config('tenantry.retention', 'on', true);
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
        DELETE FROM public.account_changes c WHERE (c.tenant_id, c.change_id) IN (
            SELECT x.tenant_id, x.change_id FROM public.account_changes x
            WHERE x.tenant_id = p_tenant AND x.created_at < p_audit_before
            LIMIT greatest(p_limit - v_audit, 0));
        GET DIAGNOSTICS v_changes = ROW_COUNT;
        v_audit := v_audit + v_changes;
    END IF;
    PERFORM set_config('tenantry.retention', v_was, true);
    RETURN QUERY SELECT v_tombstones, v_audit;
END
$$;

--
-- Name: tenantry_retention_gauges(integer); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.tenantry_retention_gauges(p_default_days integer) RETURNS TABLE(tenant_class text, candidates bigint, tombstones bigint, blob_deletions bigint, lag_seconds double precision, deleted_total bigint, last_deleted bigint)
    LANGUAGE sql STABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'public'
    AS $$
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

--
-- Name: tenantry_retention_gauges_v2(integer); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.tenantry_retention_gauges_v2(p_default_days integer) RETURNS TABLE(tenant_class text, candidates bigint, tombstones bigint, blob_deletions bigint, blob_bytes bigint, lag_seconds double precision, deleted_total bigint, last_deleted bigint)
    LANGUAGE sql STABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'public'
    AS $$
    SELECT t.plan, sum(d.n)::bigint,
           coalesce(sum(l.deleted_total - l.tombstones_expired), 0)::bigint, sum(b.n)::bigint,
           coalesce(sum(u.bytes), 0)::bigint,
           coalesce(max(extract(epoch FROM d.cutoff - d.oldest)), 0)::double precision,
           coalesce(sum(l.deleted_total), 0)::bigint, coalesce(sum(l.last_deleted), 0)::bigint
    FROM public.tenants t
    LEFT JOIN public.retention_policies p ON p.tenant_id = t.tenant_id
    LEFT JOIN public.cleanup_leases l ON l.tenant_id = t.tenant_id
    LEFT JOIN public.blob_usage u ON u.tenant_id = t.tenant_id
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

--
-- Name: tenantry_retention_under_way(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.tenantry_retention_under_way() RETURNS boolean
    LANGUAGE sql STABLE
    AS $$
    SELECT coalesce(current_setting('tenantry.retention', true), '') = 'on'
$$;

--
-- Name: tenantry_run_events(text, uuid, integer, integer); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.tenantry_run_events(p_tenant text, p_run uuid, p_after integer, p_limit integer) RETURNS TABLE(seq integer, type text, data jsonb, created_at timestamp with time zone, format smallint)
    LANGUAGE plpgsql STABLE
    SET search_path TO 'pg_catalog', 'public'
    AS $$
BEGIN
    PERFORM set_config('tenantry.tenant_id', p_tenant, true);
    RETURN QUERY
    SELECT e.seq, e.type, coalesce(p.data, e.data), e.created_at, e.format
    FROM public.run_events e
    LEFT JOIN public.run_event_payloads p
      ON p.tenant_id = e.tenant_id AND p.run_id = e.run_id AND p.seq = e.seq
    WHERE e.tenant_id = p_tenant AND e.run_id = p_run AND e.seq > p_after
    ORDER BY e.seq
    LIMIT p_limit;
END
$$;

--
-- Name: tenantry_run_for_worker(text, uuid); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.tenantry_run_for_worker(p_tenant text, p_run uuid) RETURNS TABLE(agent_id uuid, agent_version integer, input jsonb, status text, lease_epoch bigint, region text, plan text, created_at timestamp with time zone, started_at timestamp with time zone, spec jsonb, tool_pins jsonb, model_pins jsonb, snapshot_pins jsonb)
    LANGUAGE plpgsql STABLE
    SET search_path TO 'pg_catalog', 'public'
    AS $$
BEGIN
    PERFORM set_config('tenantry.tenant_id', p_tenant, true);
    RETURN QUERY
    SELECT r.agent_id, r.agent_version, r.input, r.status, r.lease_epoch, t.region, t.plan,
           r.created_at, r.started_at, v.spec, v.tool_pins,
           coalesce(p.model_pins, '{}'::jsonb), coalesce(p.snapshot_pins, '{}'::jsonb)
    FROM public.runs r
    JOIN public.tenants t ON t.tenant_id = r.tenant_id
    JOIN public.agent_versions v ON v.tenant_id = r.tenant_id AND v.agent_id = r.agent_id
                                AND v.version = r.agent_version
    LEFT JOIN LATERAL (
        SELECT jsonb_object_agg(s.model, s.accepted)
                   FILTER (WHERE 'platform' = ANY (s.accepted_on)) AS model_pins,
               jsonb_object_agg(s.model, jsonb_build_object('snapshot', s.accepted,
                                                            'on', to_jsonb(s.accepted_on)))
                   AS snapshot_pins
        FROM public.agent_model_snapshots s
        WHERE s.tenant_id = r.tenant_id AND s.agent_id = r.agent_id AND s.held
    ) p ON true
    WHERE r.tenant_id = p_tenant AND r.run_id = p_run;
END
$$;

--
-- Name: tenantry_runs_by_status(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.tenantry_runs_by_status() RETURNS TABLE(tenant_class text, status text, runs bigint)
    LANGUAGE sql STABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'public'
    AS $$
    SELECT t.plan, s.status, sum(s.runs)::bigint
    FROM (
        SELECT l.tenant_id, v.status, v.runs
        FROM public.tenant_load l
        CROSS JOIN LATERAL (VALUES ('queued', l.queued::bigint), ('running', l.running::bigint),
                                   ('waiting', l.waiting::bigint)) AS v (status, runs)
        UNION ALL
        SELECT e.tenant_id, e.status, e.runs FROM public.run_status_totals e
    ) s
    JOIN public.tenants t ON t.tenant_id = s.tenant_id
    GROUP BY t.plan, s.status
    ORDER BY t.plan, s.status
$$;

--
-- Name: tenantry_scheduler_gauges(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.tenantry_scheduler_gauges() RETURNS TABLE(tenant_class text, queued bigint, running bigint, waiting bigint, oldest_queued_seconds double precision)
    LANGUAGE sql STABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'public'
    AS $$
    SELECT t.plan, sum(l.queued)::bigint, sum(l.running)::bigint, sum(l.waiting)::bigint,
           coalesce(extract(epoch FROM now() - (
               SELECT min(r.created_at) FROM public.runs r JOIN public.tenants t2
                   ON t2.tenant_id = r.tenant_id
               WHERE r.status = 'queued' AND t2.plan = t.plan)), 0)::float8
    FROM public.tenant_load l JOIN public.tenants t ON t.tenant_id = l.tenant_id
    GROUP BY t.plan ORDER BY t.plan
$$;

--
-- Name: tenantry_snapshot_owners_follow(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.tenantry_snapshot_owners_follow() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    IF NEW.accepted IS DISTINCT FROM OLD.accepted THEN
        NEW.accepted_on := CASE WHEN NEW.accepted = OLD.changed_to THEN OLD.changed_on
                                ELSE '{}' END;
    END IF;
    IF NEW.changed_to IS NULL THEN
        NEW.changed_on := '{}';
    END IF;
    RETURN NEW;
END
$$;

--
-- Name: tenantry_spent_webhooks(integer, double precision, integer); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.tenantry_spent_webhooks(p_batch integer, p_seconds double precision, p_max_attempts integer) RETURNS TABLE(tenant_id text, run_id uuid, attempts integer)
    LANGUAGE sql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'public'
    AS $$
    WITH spent AS (
        SELECT r.tenant_id, r.run_id FROM public.runs r
        WHERE r.webhook_state = 'pending' AND r.webhook_next_at <= now()
          AND r.webhook_attempts >= p_max_attempts
        ORDER BY r.webhook_next_at
        LIMIT p_batch
        FOR UPDATE SKIP LOCKED
    )
    UPDATE public.runs r
    SET webhook_next_at = now() + make_interval(secs => p_seconds)
    FROM spent
    WHERE r.tenant_id = spent.tenant_id AND r.run_id = spent.run_id
    RETURNING r.tenant_id, r.run_id, r.webhook_attempts
$$;

--
-- Name: tenantry_sweep_reservations(integer); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.tenantry_sweep_reservations(p_limit integer) RETURNS integer
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'public'
    AS $$
DECLARE
    v_forfeited integer;
    v_tenant text;
BEGIN
    WITH stale AS (
        SELECT b.tenant_id, b.reservation_id, b.cost_micros
        FROM public.budget_reservations b
        JOIN public.runs r ON r.tenant_id = b.tenant_id AND r.run_id = b.run_id
        WHERE b.status = 'reserved'
          AND (r.lease_epoch <> b.lease_epoch OR r.status <> 'running')
          AND b.tenant_id <> ALL (public.tenantry_frozen_tenants())
        LIMIT p_limit
        FOR UPDATE OF b SKIP LOCKED
    ), closed AS (
        UPDATE public.budget_reservations b SET status = 'forfeited', closed_at = now()
        FROM stale WHERE b.tenant_id = stale.tenant_id
                     AND b.reservation_id = stale.reservation_id
        RETURNING b.tenant_id, b.cost_micros, b.counted
    ), per_tenant AS (
        SELECT tenant_id, sum(cost_micros) AS cost FROM closed WHERE counted
        GROUP BY tenant_id
    ), released AS (
        UPDATE public.tenant_budget l
        SET reserved_micros = greatest(l.reserved_micros - per_tenant.cost, 0)
        FROM per_tenant WHERE l.tenant_id = per_tenant.tenant_id
        RETURNING 1
    )
    SELECT count(*)::integer INTO v_forfeited FROM closed;

    FOR v_tenant IN
        SELECT b.tenant_id FROM public.tenant_budget b
        WHERE b.tenant_id IN (SELECT r.tenant_id FROM public.budget_reservations r
                              WHERE r.unfolded)
          AND b.tenant_id <> ALL (public.tenantry_frozen_tenants())
        LIMIT p_limit
        FOR UPDATE OF b SKIP LOCKED
    LOOP
        PERFORM public.tenantry_fold_closings(v_tenant);
    END LOOP;
    RETURN v_forfeited;
END
$$;

--
-- Name: tenantry_take_cleanup_lease(text, text, double precision); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.tenantry_take_cleanup_lease(p_tenant text, p_owner text, p_seconds double precision) RETURNS bigint
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'public'
    AS $$
DECLARE
    v_epoch bigint;
BEGIN
    IF p_tenant = ANY (public.tenantry_frozen_tenants()) THEN
        RETURN NULL;  -- moving: its rows stay as they are until the move ends
    END IF;
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

--
-- Name: tenantry_uncount_deleted_run(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.tenantry_uncount_deleted_run() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'public'
    AS $$
BEGIN
    UPDATE public.tenant_load SET
        queued  = queued  - (OLD.status = 'queued')::int,
        running = running - (OLD.status = 'running')::int,
        waiting = waiting - (OLD.status = 'waiting')::int
    WHERE tenant_id = OLD.tenant_id AND OLD.status IN ('queued', 'running', 'waiting');
    RETURN NULL;
END
$$;

--
-- Name: tenantry_usage_per_account_day(text, timestamp with time zone, timestamp with time zone); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.tenantry_usage_per_account_day(p_account text, p_from timestamp with time zone, p_to timestamp with time zone) RETURNS TABLE(day date, calls bigint, input_tokens numeric, cached_input_tokens numeric, cache_write_input_tokens numeric, output_tokens numeric, cost_micros numeric)
    LANGUAGE sql STABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'public'
    AS $$
    SELECT (f.created_at AT TIME ZONE 'UTC')::date, count(*), sum(f.input_tokens),
           sum(f.cached_input_tokens), sum(f.cache_write_input_tokens), sum(f.output_tokens),
           sum(f.cost_micros)
    FROM public.usage_facts f
    WHERE f.account = p_account AND f.created_at >= p_from AND f.created_at < p_to
    GROUP BY 1 ORDER BY 1
$$;

--
-- Name: tenantry_usage_per_tenant(timestamp with time zone, timestamp with time zone); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.tenantry_usage_per_tenant(p_from timestamp with time zone, p_to timestamp with time zone) RETURNS TABLE(tenant_id text, runs bigint, calls bigint, input_tokens numeric, cached_input_tokens numeric, output_tokens numeric, cost_micros numeric, sandbox_ms numeric, sandbox_cost_micros numeric, activity_attempts bigint, activity_sandbox_ms numeric, activity_cpu_us numeric, activity_peak_memory_bytes bigint, activity_cost_micros numeric)
    LANGUAGE sql STABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'public'
    AS $$
    WITH model AS (
        SELECT f.tenant_id, count(*) AS calls, sum(f.input_tokens) AS input_tokens,
               sum(f.cached_input_tokens) AS cached_input_tokens,
               sum(f.output_tokens) AS output_tokens, sum(f.cost_micros) AS cost_micros
        FROM public.usage_facts f
        WHERE f.created_at >= p_from AND f.created_at < p_to
        GROUP BY f.tenant_id
    ), sandbox AS (
        SELECT s.tenant_id, sum(s.sandbox_ms) AS sandbox_ms,
               sum(s.cost_micros) AS sandbox_cost_micros,
               count(*) FILTER (WHERE s.attempt IS NOT NULL) AS activity_attempts,
               sum(s.sandbox_ms) FILTER (WHERE s.attempt IS NOT NULL) AS activity_sandbox_ms,
               sum(s.cpu_us) AS activity_cpu_us,
               max(s.peak_memory_bytes) AS activity_peak_memory_bytes,
               sum(s.cost_micros) FILTER (WHERE s.attempt IS NOT NULL) AS activity_cost_micros
        FROM public.sandbox_usage_facts s
        WHERE s.created_at >= p_from AND s.created_at < p_to
        GROUP BY s.tenant_id
    ), runs AS (
        SELECT u.tenant_id, count(DISTINCT u.run_id) AS runs
        FROM (SELECT f.tenant_id, f.run_id FROM public.usage_facts f
              WHERE f.created_at >= p_from AND f.created_at < p_to
              UNION ALL
              SELECT s.tenant_id, s.run_id FROM public.sandbox_usage_facts s
              WHERE s.created_at >= p_from AND s.created_at < p_to) u
        GROUP BY u.tenant_id
    )
    SELECT r.tenant_id, r.runs, coalesce(m.calls, 0), m.input_tokens, m.cached_input_tokens,
           m.output_tokens, m.cost_micros, s.sandbox_ms, s.sandbox_cost_micros,
           coalesce(s.activity_attempts, 0), s.activity_sandbox_ms, s.activity_cpu_us,
           s.activity_peak_memory_bytes, s.activity_cost_micros
    FROM runs r
    LEFT JOIN model m ON m.tenant_id = r.tenant_id
    LEFT JOIN sandbox s ON s.tenant_id = r.tenant_id
    ORDER BY r.tenant_id
$$;

--
-- Name: tenantry_usage_per_tenant_v2(timestamp with time zone, timestamp with time zone); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.tenantry_usage_per_tenant_v2(p_from timestamp with time zone, p_to timestamp with time zone) RETURNS TABLE(tenant_id text, runs bigint, calls bigint, input_tokens numeric, cached_input_tokens numeric, output_tokens numeric, cost_micros numeric, sandbox_ms numeric, sandbox_cost_micros numeric, activity_attempts bigint, activity_sandbox_ms numeric, activity_cpu_us numeric, activity_peak_memory_bytes bigint, activity_cost_micros numeric, own_calls bigint, own_input_tokens numeric, own_cached_input_tokens numeric, own_output_tokens numeric, own_cost_micros numeric)
    LANGUAGE sql STABLE SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'public'
    AS $$
    WITH facts AS (
        SELECT f.*, coalesce(f.account_owner = 'tenant', EXISTS (
                   SELECT 1 FROM public.model_accounts a
                   WHERE a.account_id = f.account AND a.tenant_id = f.tenant_id)) AS own
        FROM public.usage_facts f
        WHERE f.created_at >= p_from AND f.created_at < p_to
    ), model AS (
        SELECT f.tenant_id, count(*) AS calls, sum(f.input_tokens) AS input_tokens,
               sum(f.cached_input_tokens) AS cached_input_tokens,
               sum(f.output_tokens) AS output_tokens, sum(f.cost_micros) AS cost_micros,
               count(*) FILTER (WHERE f.own) AS own_calls,
               sum(f.input_tokens) FILTER (WHERE f.own) AS own_input_tokens,
               sum(f.cached_input_tokens) FILTER (WHERE f.own) AS own_cached_input_tokens,
               sum(f.output_tokens) FILTER (WHERE f.own) AS own_output_tokens,
               sum(f.cost_micros) FILTER (WHERE f.own) AS own_cost_micros
        FROM facts f
        GROUP BY f.tenant_id
    ), sandbox AS (
        SELECT s.tenant_id, sum(s.sandbox_ms) AS sandbox_ms,
               sum(s.cost_micros) AS sandbox_cost_micros,
               count(*) FILTER (WHERE s.attempt IS NOT NULL) AS activity_attempts,
               sum(s.sandbox_ms) FILTER (WHERE s.attempt IS NOT NULL) AS activity_sandbox_ms,
               sum(s.cpu_us) AS activity_cpu_us,
               max(s.peak_memory_bytes) AS activity_peak_memory_bytes,
               sum(s.cost_micros) FILTER (WHERE s.attempt IS NOT NULL) AS activity_cost_micros
        FROM public.sandbox_usage_facts s
        WHERE s.created_at >= p_from AND s.created_at < p_to
        GROUP BY s.tenant_id
    ), runs AS (
        SELECT u.tenant_id, count(DISTINCT u.run_id) AS runs
        FROM (SELECT f.tenant_id, f.run_id FROM public.usage_facts f
              WHERE f.created_at >= p_from AND f.created_at < p_to
              UNION ALL
              SELECT s.tenant_id, s.run_id FROM public.sandbox_usage_facts s
              WHERE s.created_at >= p_from AND s.created_at < p_to) u
        GROUP BY u.tenant_id
    )
    SELECT r.tenant_id, r.runs, coalesce(m.calls, 0), m.input_tokens, m.cached_input_tokens,
           m.output_tokens, m.cost_micros, s.sandbox_ms, s.sandbox_cost_micros,
           coalesce(s.activity_attempts, 0), s.activity_sandbox_ms, s.activity_cpu_us,
           s.activity_peak_memory_bytes, s.activity_cost_micros,
           coalesce(m.own_calls, 0), m.own_input_tokens, m.own_cached_input_tokens,
           m.own_output_tokens, m.own_cost_micros
    FROM runs r
    LEFT JOIN model m ON m.tenant_id = r.tenant_id
    LEFT JOIN sandbox s ON s.tenant_id = r.tenant_id
    ORDER BY r.tenant_id
$$;

--
-- Name: tenantry_wake_authorized(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.tenantry_wake_authorized() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'public'
    AS $$
BEGIN
    UPDATE public.runs
    SET status = 'queued', waiting_tool_server = NULL, available_at = NULL, updated_at = now()
    WHERE tenant_id = NEW.tenant_id AND waiting_tool_server = NEW.server_id
      AND status = 'waiting';
    RETURN NULL;
END
$$;

--
-- Name: tenantry_wake_parent(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.tenantry_wake_parent() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    PERFORM 1 FROM runs
    WHERE tenant_id = NEW.tenant_id AND run_id = NEW.parent_run_id AND kind = 'agent'
    FOR UPDATE;
    UPDATE runs SET status = 'queued', updated_at = now()
    WHERE tenant_id = NEW.tenant_id AND run_id = NEW.parent_run_id AND kind = 'agent'
      AND status = 'waiting';
    RETURN NEW;
END $$;

--
-- Name: tenantry_wake_parked(text[], integer); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.tenantry_wake_parked(p_models text[], p_limit integer) RETURNS integer
    LANGUAGE sql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'public'
    AS $$
    WITH due AS (
        SELECT r.tenant_id, r.run_id FROM public.runs r
        WHERE r.status = 'waiting' AND r.parked_on IS NOT NULL
          AND r.tenant_id <> ALL (public.tenantry_frozen_tenants())
          AND (CASE WHEN p_models IS NULL THEN r.available_at <= now()
                    ELSE r.parked_on && p_models OR '*' = ANY (p_models) END)
        LIMIT p_limit
        FOR UPDATE SKIP LOCKED
    ), woken AS (
        UPDATE public.runs r
        SET status = 'queued', parked_on = NULL, available_at = NULL, updated_at = now()
        FROM due WHERE r.tenant_id = due.tenant_id AND r.run_id = due.run_id
        RETURNING 1
    )
    SELECT count(*)::integer FROM woken
$$;

--
-- Name: tenantry_wake_spend_capped(text, integer); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.tenantry_wake_spend_capped(p_tenant text, p_limit integer) RETURNS integer
    LANGUAGE sql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'public'
    AS $$
    WITH capped AS MATERIALIZED (
        SELECT DISTINCT r.tenant_id FROM public.runs r
        WHERE r.status = 'waiting' AND r.waiting_cap_micros IS NOT NULL
          AND (p_tenant IS NULL OR r.tenant_id = p_tenant)
    ), room AS MATERIALIZED (
        SELECT c.tenant_id, p.monthly_spend_cap_micros AS cap,
               (p.monthly_spend_cap_micros IS NULL
                OR public.tenantry_month_spend(b) < p.monthly_spend_cap_micros) AS under
        FROM capped c
        JOIN public.tenant_policies p ON p.tenant_id = c.tenant_id
        JOIN public.tenant_budget b ON b.tenant_id = c.tenant_id
        WHERE c.tenant_id <> ALL (public.tenantry_frozen_tenants())
    ), due AS (
        SELECT r.tenant_id, r.run_id FROM public.runs r
        JOIN room m ON m.tenant_id = r.tenant_id
        WHERE r.status = 'waiting' AND r.waiting_cap_micros IS NOT NULL
          AND (r.available_at <= now()
               OR (m.under AND (m.cap IS NULL OR m.cap > r.waiting_cap_micros)))
        ORDER BY r.available_at, r.run_id
        LIMIT p_limit
        FOR UPDATE OF r SKIP LOCKED
    ), woken AS (
        UPDATE public.runs r
        SET status = 'queued', waiting_cap_micros = NULL, available_at = NULL,
            updated_at = now()
        FROM due WHERE r.tenant_id = due.tenant_id AND r.run_id = due.run_id
        RETURNING 1
    )
    SELECT count(*)::integer FROM woken
$$;

--
-- Name: account_changes; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.account_changes (
    tenant_id text NOT NULL,
    change_id uuid NOT NULL,
    actor text NOT NULL,
    action text NOT NULL,
    target text NOT NULL,
    status smallint NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT account_changes_action_check CHECK (((length(action) >= 1) AND (length(action) <= 300))),
    CONSTRAINT account_changes_actor_check CHECK (((length(actor) >= 1) AND (length(actor) <= 200))),
    CONSTRAINT account_changes_status_check CHECK (((status >= 100) AND (status <= 599))),
    CONSTRAINT account_changes_target_check CHECK (((length(target) >= 1) AND (length(target) <= 2000)))
);

--
-- Name: activity_bundles; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.activity_bundles (
    tenant_id text NOT NULL,
    digest text NOT NULL,
    entrypoint text NOT NULL,
    files jsonb NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT activity_bundles_digest_check CHECK ((digest ~ '^sha256:[0-9a-f]{64}$'::text))
);

--
-- Name: activity_versions; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.activity_versions (
    tenant_id text NOT NULL,
    agent_id uuid NOT NULL,
    version integer NOT NULL,
    name text NOT NULL,
    bundle_digest text NOT NULL,
    timeout_s double precision NOT NULL,
    heartbeat_timeout_s double precision,
    max_attempts integer NOT NULL,
    backoff_s double precision NOT NULL,
    secret_names text[] DEFAULT '{}'::text[] NOT NULL,
    egress text[] DEFAULT '{}'::text[] NOT NULL,
    retryable_exit_codes integer[] DEFAULT '{}'::integer[] NOT NULL,
    max_sandbox_deaths integer DEFAULT 3 NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    batch_max_tasks integer,
    batch_max_seconds double precision,
    warm_idle_seconds double precision,
    CONSTRAINT activity_versions_backoff_s_check CHECK (((backoff_s >= (0)::double precision) AND (backoff_s <= (86400)::double precision))),
    CONSTRAINT activity_versions_batch_max_seconds_check CHECK (((batch_max_seconds > (0)::double precision) AND (batch_max_seconds <= (86400)::double precision))),
    CONSTRAINT activity_versions_batch_max_tasks_check CHECK (((batch_max_tasks >= 1) AND (batch_max_tasks <= 1000))),
    CONSTRAINT activity_versions_batch_whole CHECK (((batch_max_tasks IS NULL) = (batch_max_seconds IS NULL))),
    CONSTRAINT activity_versions_heartbeat_timeout_s_check CHECK ((heartbeat_timeout_s > (0)::double precision)),
    CONSTRAINT activity_versions_max_attempts_check CHECK (((max_attempts >= 1) AND (max_attempts <= 100))),
    CONSTRAINT activity_versions_max_sandbox_deaths_check CHECK (((max_sandbox_deaths >= 1) AND (max_sandbox_deaths <= 100))),
    CONSTRAINT activity_versions_timeout_s_check CHECK (((timeout_s > (0)::double precision) AND (timeout_s <= (3600)::double precision))),
    CONSTRAINT activity_versions_version_check CHECK ((version >= 1)),
    CONSTRAINT activity_versions_warm_idle_seconds_check CHECK (((warm_idle_seconds > (0)::double precision) AND (warm_idle_seconds <= (3600)::double precision)))
);

--
-- Name: agent_evaluations; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.agent_evaluations (
    tenant_id text NOT NULL,
    evaluation_id uuid NOT NULL,
    agent_id uuid NOT NULL,
    test_set_id uuid NOT NULL,
    baseline_version integer NOT NULL,
    candidate_version integer NOT NULL,
    candidate_model text,
    cases integer NOT NULL,
    created_by text NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL
);

--
-- Name: agent_model_snapshot_promotions; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.agent_model_snapshot_promotions (
    tenant_id text NOT NULL,
    agent_id uuid NOT NULL,
    model text NOT NULL,
    promotion_id uuid NOT NULL,
    previous text NOT NULL,
    provider_model text NOT NULL,
    promoted_by uuid NOT NULL,
    promoted_at timestamp with time zone DEFAULT now() NOT NULL
);

--
-- Name: agent_model_snapshots; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.agent_model_snapshots (
    tenant_id text NOT NULL,
    agent_id uuid NOT NULL,
    model text NOT NULL,
    accepted text NOT NULL,
    accepted_at timestamp with time zone DEFAULT now() NOT NULL,
    changed_to text,
    changed_at timestamp with time zone,
    held boolean DEFAULT false NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    accepted_on text[] DEFAULT '{}'::text[] NOT NULL,
    changed_on text[] DEFAULT '{}'::text[] NOT NULL,
    CONSTRAINT agent_model_snapshots_accepted_check CHECK (((octet_length(accepted) >= 1) AND (octet_length(accepted) <= 800))),
    CONSTRAINT agent_model_snapshots_accepted_on_check CHECK ((accepted_on <@ ARRAY['platform'::text, 'tenant'::text])),
    CONSTRAINT agent_model_snapshots_changed_on_check CHECK ((changed_on <@ ARRAY['platform'::text, 'tenant'::text])),
    CONSTRAINT agent_model_snapshots_changed_to_check CHECK (((octet_length(changed_to) >= 1) AND (octet_length(changed_to) <= 800))),
    CONSTRAINT agent_model_snapshots_check CHECK (((changed_to IS NULL) = (changed_at IS NULL))),
    CONSTRAINT agent_model_snapshots_check1 CHECK ((changed_to <> accepted)),
    CONSTRAINT agent_model_snapshots_model_check CHECK (((octet_length(model) >= 1) AND (octet_length(model) <= 800)))
);

--
-- Name: agent_promotions; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.agent_promotions (
    tenant_id text NOT NULL,
    agent_id uuid NOT NULL,
    promotion_id uuid NOT NULL,
    version integer NOT NULL,
    previous_version integer NOT NULL,
    promoted_by text NOT NULL,
    evaluation_id uuid,
    promoted_at timestamp with time zone DEFAULT now() NOT NULL
);

--
-- Name: agent_test_sets; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.agent_test_sets (
    tenant_id text NOT NULL,
    test_set_id uuid NOT NULL,
    agent_id uuid NOT NULL,
    name text NOT NULL,
    tool_results text NOT NULL,
    stubs jsonb DEFAULT '{}'::jsonb NOT NULL,
    cases jsonb NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    case_count integer,
    CONSTRAINT agent_test_sets_case_count_check CHECK ((case_count >= 0)),
    CONSTRAINT agent_test_sets_tool_results_check CHECK ((tool_results = ANY (ARRAY['recorded'::text, 'live'::text])))
);

--
-- Name: agent_version_flags; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.agent_version_flags (
    tenant_id text NOT NULL,
    agent_id uuid NOT NULL,
    version integer NOT NULL,
    refused_egress bigint DEFAULT 0 NOT NULL,
    reason text,
    flagged_at timestamp with time zone,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT agent_version_flags_check CHECK (((reason IS NULL) = (flagged_at IS NULL))),
    CONSTRAINT agent_version_flags_reason_check CHECK ((reason = 'egress_refused'::text)),
    CONSTRAINT agent_version_flags_refused_egress_check CHECK ((refused_egress >= 0))
);

--
-- Name: agent_versions; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.agent_versions (
    tenant_id text NOT NULL,
    agent_id uuid NOT NULL,
    version integer NOT NULL,
    spec jsonb NOT NULL,
    spec_sha256 bytea NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    tool_pins jsonb DEFAULT '{}'::jsonb NOT NULL,
    CONSTRAINT agent_versions_version_check CHECK ((version >= 1))
);

--
-- Name: agents; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.agents (
    tenant_id text NOT NULL,
    agent_id uuid NOT NULL,
    name text NOT NULL,
    latest_version integer NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    live_version integer DEFAULT 1 NOT NULL,
    CONSTRAINT agents_latest_version_check CHECK ((latest_version >= 1)),
    CONSTRAINT agents_live_version_published CHECK (((live_version >= 1) AND (live_version <= latest_version)))
);

--
-- Name: api_keys; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.api_keys (
    tenant_id text NOT NULL,
    key_id uuid NOT NULL,
    key_hash bytea NOT NULL,
    key_prefix text NOT NULL,
    name text DEFAULT ''::text NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    revoked_at timestamp with time zone,
    scopes text[],
    expires_at timestamp with time zone,
    created_by text,
    replaces uuid,
    CONSTRAINT api_keys_created_by_check CHECK (((created_by IS NULL) OR ((length(created_by) >= 1) AND (length(created_by) <= 200)))),
    CONSTRAINT api_keys_key_hash_check CHECK ((octet_length(key_hash) = 32)),
    CONSTRAINT api_keys_scopes_check CHECK (((scopes IS NULL) OR ((cardinality(scopes) >= 1) AND (cardinality(scopes) <= 32))))
);

--
-- Name: app_sessions; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.app_sessions (
    tenant_id text NOT NULL,
    session_hash bytea NOT NULL,
    user_id uuid NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    expires_at timestamp with time zone NOT NULL,
    revoked_at timestamp with time zone,
    CONSTRAINT app_sessions_session_hash_check CHECK ((octet_length(session_hash) = 32))
);

--
-- Name: approvals; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.approvals (
    tenant_id text NOT NULL,
    approval_id uuid NOT NULL,
    run_id uuid NOT NULL,
    key text NOT NULL,
    tool text NOT NULL,
    arguments jsonb NOT NULL,
    arguments_sha256 bytea NOT NULL,
    status text DEFAULT 'pending'::text NOT NULL,
    comment text,
    requested_at timestamp with time zone DEFAULT now() NOT NULL,
    expires_at timestamp with time zone NOT NULL,
    decided_at timestamp with time zone,
    CONSTRAINT approvals_status_check CHECK ((status = ANY (ARRAY['pending'::text, 'approved'::text, 'denied'::text, 'expired'::text, 'cancelled'::text])))
);

--
-- Name: audit_log; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.audit_log (
    tenant_id text NOT NULL,
    audit_id uuid NOT NULL,
    run_id uuid NOT NULL,
    tool text NOT NULL,
    server text,
    key text NOT NULL,
    arguments_sha256 bytea,
    outcome text NOT NULL,
    detail text,
    duration_ms double precision NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL
);

--
-- Name: billing_reconcile_days; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.billing_reconcile_days (
    account text NOT NULL,
    day date NOT NULL,
    status text NOT NULL,
    attempts integer DEFAULT 0 NOT NULL,
    next_attempt_at timestamp with time zone,
    last_error text,
    reconciliation_id uuid,
    difference_ratio double precision,
    flagged boolean DEFAULT false NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT billing_reconcile_days_account_check CHECK (((length(account) >= 1) AND (length(account) <= 64))),
    CONSTRAINT billing_reconcile_days_attempts_check CHECK ((attempts >= 0)),
    CONSTRAINT billing_reconcile_days_difference_ratio_check CHECK ((difference_ratio >= (0)::double precision)),
    CONSTRAINT billing_reconcile_days_last_error_check CHECK ((length(last_error) <= 500)),
    CONSTRAINT billing_reconcile_days_status_check CHECK ((status = ANY (ARRAY['pending'::text, 'done'::text, 'late'::text])))
);

--
-- Name: billing_reconcile_lease; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.billing_reconcile_lease (
    job text NOT NULL,
    owner text,
    epoch bigint DEFAULT 0 NOT NULL,
    expires_at timestamp with time zone,
    CONSTRAINT billing_reconcile_lease_job_check CHECK ((job = 'billing_reconcile'::text)),
    CONSTRAINT billing_reconcile_lease_owner_check CHECK ((length(owner) <= 100))
);

--
-- Name: billing_reconciliations; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.billing_reconciliations (
    reconciliation_id uuid NOT NULL,
    account text NOT NULL,
    provider text NOT NULL,
    from_day date NOT NULL,
    to_day date NOT NULL,
    source text NOT NULL,
    cost_compared boolean NOT NULL,
    flagged_days integer NOT NULL,
    days jsonb NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    scheduled_day date,
    CONSTRAINT billing_reconciliations_check CHECK ((to_day >= from_day)),
    CONSTRAINT billing_reconciliations_flagged_days_check CHECK ((flagged_days >= 0)),
    CONSTRAINT billing_reconciliations_source_check CHECK ((source = ANY (ARRAY['export'::text, 'fetch'::text])))
);

--
-- Name: blob_deletions; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.blob_deletions (
    tenant_id text NOT NULL,
    ref text NOT NULL,
    run_id uuid,
    queued_at timestamp with time zone DEFAULT now() NOT NULL,
    attempts integer DEFAULT 0 NOT NULL,
    next_at timestamp with time zone DEFAULT now() NOT NULL,
    last_error text
);

--
-- Name: blob_usage; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.blob_usage (
    tenant_id text NOT NULL,
    bytes bigint DEFAULT 0 NOT NULL,
    CONSTRAINT blob_usage_bytes_check CHECK ((bytes >= 0))
);

--
-- Name: blobs; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.blobs (
    tenant_id text NOT NULL,
    ref text NOT NULL,
    run_id uuid NOT NULL,
    kind text NOT NULL,
    bytes bigint NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT blobs_bytes_check CHECK ((bytes >= 0)),
    CONSTRAINT blobs_kind_check CHECK ((kind = ANY (ARRAY['tool_output'::text, 'sandbox_files'::text, 'screenshot'::text])))
);

--
-- Name: budget_reservations; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.budget_reservations (
    tenant_id text NOT NULL,
    reservation_id uuid NOT NULL,
    run_id uuid NOT NULL,
    lease_epoch bigint NOT NULL,
    tokens bigint NOT NULL,
    cost_micros bigint NOT NULL,
    status text DEFAULT 'reserved'::text NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    closed_at timestamp with time zone,
    spent_tokens bigint,
    spent_micros bigint,
    unfolded boolean DEFAULT false NOT NULL,
    counted boolean DEFAULT true NOT NULL,
    CONSTRAINT budget_reservations_cost_micros_check CHECK ((cost_micros >= 0)),
    CONSTRAINT budget_reservations_spent_micros_check CHECK ((spent_micros >= 0)),
    CONSTRAINT budget_reservations_spent_tokens_check CHECK ((spent_tokens >= 0)),
    CONSTRAINT budget_reservations_status_check CHECK ((status = ANY (ARRAY['reserved'::text, 'settled'::text, 'released'::text, 'forfeited'::text]))),
    CONSTRAINT budget_reservations_tokens_check CHECK ((tokens >= 0)),
    CONSTRAINT budget_reservations_unfolded_is_closed CHECK (((NOT unfolded) OR ((status = ANY (ARRAY['settled'::text, 'released'::text])) AND (spent_tokens IS NOT NULL) AND (spent_micros IS NOT NULL))))
);

--
-- Name: cleanup_leases; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.cleanup_leases (
    tenant_id text NOT NULL,
    owner text,
    epoch bigint DEFAULT 0 NOT NULL,
    expires_at timestamp with time zone,
    last_pass_at timestamp with time zone,
    last_deleted bigint DEFAULT 0 NOT NULL,
    deleted_total bigint DEFAULT 0 NOT NULL,
    tombstones_expired bigint DEFAULT 0 NOT NULL
);

--
-- Name: console_actions; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.console_actions (
    action_id bigint NOT NULL,
    at timestamp with time zone DEFAULT clock_timestamp() NOT NULL,
    actor text NOT NULL,
    action text NOT NULL,
    tenant_id text,
    target text NOT NULL,
    outcome text NOT NULL,
    detail text,
    CONSTRAINT console_actions_action_check CHECK (((action = ANY (ARRAY['cancel_run'::text, 'approve'::text, 'deny'::text, 'requeue_task'::text, 'revoke_api_key'::text, 'pause_admissions'::text, 'resume_admissions'::text, 'connect_tool_server'::text])) OR ((action ~ '^(POST|PUT|PATCH|DELETE) /admin/v1/[^ ]*$'::text) AND (length(action) <= 200)))),
    CONSTRAINT console_actions_actor_check CHECK (((length(actor) >= 1) AND (length(actor) <= 200))),
    CONSTRAINT console_actions_detail_check CHECK ((length(detail) <= 2000)),
    CONSTRAINT console_actions_outcome_check CHECK (((length(outcome) >= 1) AND (length(outcome) <= 500))),
    CONSTRAINT console_actions_target_check CHECK ((length(target) <= 200))
);

--
-- Name: console_actions_action_id_seq; Type: SEQUENCE; Schema: public; Owner: -
--

ALTER TABLE public.console_actions ALTER COLUMN action_id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME public.console_actions_action_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

--
-- Name: console_session_epoch; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.console_session_epoch (
    singleton boolean DEFAULT true NOT NULL,
    epoch bigint DEFAULT 1 NOT NULL,
    revoked_at timestamp with time zone,
    CONSTRAINT console_session_epoch_epoch_check CHECK ((epoch >= 1)),
    CONSTRAINT console_session_epoch_singleton_check CHECK (singleton)
);

--
-- Name: endpoint_deliveries; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.endpoint_deliveries (
    tenant_id text NOT NULL,
    run_id uuid NOT NULL,
    endpoint_id uuid NOT NULL,
    state text DEFAULT 'pending'::text NOT NULL,
    attempts integer DEFAULT 0 NOT NULL,
    next_at timestamp with time zone,
    CONSTRAINT endpoint_deliveries_state_check CHECK ((state = ANY (ARRAY['pending'::text, 'delivered'::text, 'failed'::text])))
);

--
-- Name: erase_jobs; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.erase_jobs (
    job_id uuid NOT NULL,
    tenant_id text NOT NULL,
    status text DEFAULT 'running'::text NOT NULL,
    runs_total bigint DEFAULT 0 NOT NULL,
    runs_deleted bigint DEFAULT 0 NOT NULL,
    runs_cancelled bigint DEFAULT 0 NOT NULL,
    secrets_deleted integer DEFAULT 0 NOT NULL,
    tool_servers_deleted integer DEFAULT 0 NOT NULL,
    blobs_queued bigint DEFAULT 0 NOT NULL,
    requested_by text NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    finished_at timestamp with time zone,
    CONSTRAINT erase_jobs_status_check CHECK ((status = ANY (ARRAY['running'::text, 'done'::text])))
);

--
-- Name: evaluation_results; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.evaluation_results (
    tenant_id text NOT NULL,
    run_id uuid NOT NULL,
    evaluation_id uuid NOT NULL,
    status text NOT NULL,
    passed boolean NOT NULL,
    verdicts jsonb NOT NULL,
    tool_calls jsonb NOT NULL,
    tool_calls_total integer NOT NULL,
    tool_calls_sha256 bytea NOT NULL,
    computed_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT evaluation_results_tool_calls_total_check CHECK ((tool_calls_total >= 0))
);

--
-- Name: evaluation_runs; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.evaluation_runs (
    tenant_id text NOT NULL,
    evaluation_id uuid NOT NULL,
    case_index integer NOT NULL,
    side text NOT NULL,
    run_id uuid NOT NULL,
    CONSTRAINT evaluation_runs_case_index_check CHECK ((case_index >= 0)),
    CONSTRAINT evaluation_runs_side_check CHECK ((side = ANY (ARRAY['baseline'::text, 'candidate'::text])))
);

--
-- Name: exports; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.exports (
    tenant_id text NOT NULL,
    export_id uuid NOT NULL,
    status text DEFAULT 'queued'::text NOT NULL,
    idempotency_key text,
    requested_by text NOT NULL,
    lease_owner text,
    lease_epoch bigint DEFAULT 0 NOT NULL,
    lease_expires_at timestamp with time zone,
    attempts integer DEFAULT 0 NOT NULL,
    archive_ref text,
    bytes bigint,
    counts jsonb,
    error text,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    started_at timestamp with time zone,
    finished_at timestamp with time zone,
    expires_at timestamp with time zone,
    CONSTRAINT exports_attempts_check CHECK ((attempts >= 0)),
    CONSTRAINT exports_bytes_check CHECK ((bytes >= 0)),
    CONSTRAINT exports_idempotency_key_check CHECK (((length(idempotency_key) >= 1) AND (length(idempotency_key) <= 255))),
    CONSTRAINT exports_status_check CHECK ((status = ANY (ARRAY['queued'::text, 'running'::text, 'ready'::text, 'failed'::text])))
);

--
-- Name: frozen_tenants; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.frozen_tenants (
    tenant_id text NOT NULL,
    state text NOT NULL,
    move_id uuid NOT NULL,
    since timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT frozen_tenants_state_check CHECK ((state = ANY (ARRAY['draining'::text, 'locked'::text, 'moved'::text, 'arriving'::text])))
);

--
-- Name: model_accounts; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.model_accounts (
    account_id text NOT NULL,
    tenant_id text,
    provider text NOT NULL,
    base_url text NOT NULL,
    models text[] NOT NULL,
    region text NOT NULL,
    rpm integer,
    tpm integer,
    priority integer DEFAULT 0 NOT NULL,
    secret_name text,
    secret_sealed bytea,
    secret_nonce bytea,
    master_key_id text,
    enabled boolean DEFAULT true NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    secret_binding smallint DEFAULT 2 NOT NULL,
    registered_by text DEFAULT 'operator'::text NOT NULL,
    CONSTRAINT model_accounts_account_id_check CHECK ((account_id ~ '^[a-z0-9][a-z0-9_-]{1,63}$'::text)),
    CONSTRAINT model_accounts_base_url_check CHECK ((base_url ~ '^https?://'::text)),
    CONSTRAINT model_accounts_check CHECK (((tenant_id IS NOT NULL) OR (secret_name IS NULL))),
    CONSTRAINT model_accounts_check1 CHECK (((secret_sealed IS NULL) = (secret_nonce IS NULL))),
    CONSTRAINT model_accounts_models_check CHECK (((cardinality(models) >= 1) AND (cardinality(models) <= 100))),
    CONSTRAINT model_accounts_provider_check CHECK ((provider = ANY (ARRAY['openai'::text, 'anthropic'::text, 'scripted'::text]))),
    CONSTRAINT model_accounts_registered_by_check CHECK ((registered_by = ANY (ARRAY['operator'::text, 'tenant'::text]))),
    CONSTRAINT model_accounts_rpm_check CHECK ((rpm > 0)),
    CONSTRAINT model_accounts_secret_binding_check CHECK ((secret_binding = ANY (ARRAY[1, 2]))),
    CONSTRAINT model_accounts_tenant_registers_its_own CHECK (((registered_by = 'operator'::text) OR (tenant_id IS NOT NULL))),
    CONSTRAINT model_accounts_tpm_check CHECK ((tpm > 0))
);

--
-- Name: model_capacity_shares; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.model_capacity_shares (
    account_id text NOT NULL,
    holder text NOT NULL,
    demand jsonb NOT NULL,
    share double precision NOT NULL,
    renewed_at timestamp with time zone DEFAULT clock_timestamp() NOT NULL,
    expires_at timestamp with time zone NOT NULL,
    CONSTRAINT model_capacity_shares_holder_check CHECK (((length(holder) >= 1) AND (length(holder) <= 100))),
    CONSTRAINT model_capacity_shares_share_check CHECK (((share >= (0)::double precision) AND (share <= (1)::double precision)))
);

--
-- Name: model_prices; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.model_prices (
    model text NOT NULL,
    effective_from timestamp with time zone NOT NULL,
    input_per_m bigint,
    cached_input_per_m bigint,
    cache_write_per_m bigint,
    output_per_m bigint,
    per_second_micros bigint,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT model_prices_cache_write_per_m_check CHECK ((cache_write_per_m >= 0)),
    CONSTRAINT model_prices_cached_input_per_m_check CHECK ((cached_input_per_m >= 0)),
    CONSTRAINT model_prices_check CHECK (
CASE
    WHEN (model = 'sandbox'::text) THEN ((per_second_micros IS NOT NULL) AND (input_per_m IS NULL) AND (cached_input_per_m IS NULL) AND (cache_write_per_m IS NULL) AND (output_per_m IS NULL))
    ELSE ((per_second_micros IS NULL) AND (input_per_m IS NOT NULL) AND (cached_input_per_m IS NOT NULL) AND (output_per_m IS NOT NULL))
END),
    CONSTRAINT model_prices_input_per_m_check CHECK ((input_per_m >= 0)),
    CONSTRAINT model_prices_model_check CHECK ((model ~ '^[^[:space:][:cntrl:]*]{1,200}$'::text)),
    CONSTRAINT model_prices_output_per_m_check CHECK ((output_per_m >= 0)),
    CONSTRAINT model_prices_per_second_micros_check CHECK ((per_second_micros >= 0))
);

--
-- Name: operator_notifications; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.operator_notifications (
    account text NOT NULL,
    day date NOT NULL,
    kind text NOT NULL,
    body jsonb NOT NULL,
    attempts integer DEFAULT 0 NOT NULL,
    next_attempt_at timestamp with time zone,
    delivered_at timestamp with time zone,
    last_error text,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT operator_notifications_account_check CHECK (((length(account) >= 1) AND (length(account) <= 64))),
    CONSTRAINT operator_notifications_attempts_check CHECK ((attempts >= 0)),
    CONSTRAINT operator_notifications_kind_check CHECK ((kind = ANY (ARRAY['billing.reconciliation.flagged'::text, 'billing.reconciliation.late'::text]))),
    CONSTRAINT operator_notifications_last_error_check CHECK ((length(last_error) <= 500))
);

--
-- Name: operator_sign_in_links; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.operator_sign_in_links (
    link_hash bytea NOT NULL,
    user_id uuid NOT NULL,
    created_by text NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    expires_at timestamp with time zone NOT NULL,
    used_at timestamp with time zone,
    CONSTRAINT operator_sign_in_links_created_by_check CHECK (((length(created_by) >= 1) AND (length(created_by) <= 200))),
    CONSTRAINT operator_sign_in_links_link_hash_check CHECK ((octet_length(link_hash) = 32))
);

--
-- Name: operator_tokens; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.operator_tokens (
    token_hash bytea NOT NULL,
    created_by text NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    expires_at timestamp with time zone,
    CONSTRAINT operator_tokens_created_by_check CHECK (((length(created_by) >= 1) AND (length(created_by) <= 200))),
    CONSTRAINT operator_tokens_token_hash_check CHECK ((octet_length(token_hash) = 32))
);

--
-- Name: operator_users; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.operator_users (
    user_id uuid NOT NULL,
    email text NOT NULL,
    role text NOT NULL,
    created_by text NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    disabled_at timestamp with time zone,
    oidc_issuer text,
    oidc_subject text,
    CONSTRAINT operator_users_check CHECK (((oidc_issuer IS NULL) = (oidc_subject IS NULL))),
    CONSTRAINT operator_users_created_by_check CHECK (((length(created_by) >= 1) AND (length(created_by) <= 200))),
    CONSTRAINT operator_users_email_check CHECK (((length(email) >= 3) AND (length(email) <= 254))),
    CONSTRAINT operator_users_oidc_issuer_check CHECK (((length(oidc_issuer) >= 1) AND (length(oidc_issuer) <= 2048))),
    CONSTRAINT operator_users_oidc_subject_check CHECK (((length(oidc_subject) >= 1) AND (length(oidc_subject) <= 255))),
    CONSTRAINT operator_users_role_check CHECK ((role = ANY (ARRAY['read-only'::text, 'support'::text, 'admin'::text])))
);

--
-- Name: retention_policies; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.retention_policies (
    tenant_id text NOT NULL,
    runs_days integer NOT NULL,
    tombstones_days integer,
    audit_days integer,
    blobs_follow_runs boolean DEFAULT true NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT retention_policies_audit_days_check CHECK (((audit_days >= 0) AND (audit_days <= 36500))),
    CONSTRAINT retention_policies_runs_days_check CHECK (((runs_days >= 0) AND (runs_days <= 36500))),
    CONSTRAINT retention_policies_tombstones_days_check CHECK (((tombstones_days >= 0) AND (tombstones_days <= 36500)))
);

--
-- Name: run_event_payloads; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.run_event_payloads (
    tenant_id text NOT NULL,
    run_id uuid NOT NULL,
    seq integer NOT NULL,
    data jsonb NOT NULL
)
PARTITION BY HASH (run_id);

--
-- Name: run_event_payloads_p00; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.run_event_payloads_p00 (
    tenant_id text NOT NULL,
    run_id uuid NOT NULL,
    seq integer NOT NULL,
    data jsonb NOT NULL
);

--
-- Name: run_event_payloads_p01; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.run_event_payloads_p01 (
    tenant_id text NOT NULL,
    run_id uuid NOT NULL,
    seq integer NOT NULL,
    data jsonb NOT NULL
);

--
-- Name: run_event_payloads_p02; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.run_event_payloads_p02 (
    tenant_id text NOT NULL,
    run_id uuid NOT NULL,
    seq integer NOT NULL,
    data jsonb NOT NULL
);

--
-- Name: run_event_payloads_p03; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.run_event_payloads_p03 (
    tenant_id text NOT NULL,
    run_id uuid NOT NULL,
    seq integer NOT NULL,
    data jsonb NOT NULL
);

--
-- Name: run_event_payloads_p04; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.run_event_payloads_p04 (
    tenant_id text NOT NULL,
    run_id uuid NOT NULL,
    seq integer NOT NULL,
    data jsonb NOT NULL
);

--
-- Name: run_event_payloads_p05; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.run_event_payloads_p05 (
    tenant_id text NOT NULL,
    run_id uuid NOT NULL,
    seq integer NOT NULL,
    data jsonb NOT NULL
);

--
-- Name: run_event_payloads_p06; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.run_event_payloads_p06 (
    tenant_id text NOT NULL,
    run_id uuid NOT NULL,
    seq integer NOT NULL,
    data jsonb NOT NULL
);

--
-- Name: run_event_payloads_p07; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.run_event_payloads_p07 (
    tenant_id text NOT NULL,
    run_id uuid NOT NULL,
    seq integer NOT NULL,
    data jsonb NOT NULL
);

--
-- Name: run_event_payloads_p08; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.run_event_payloads_p08 (
    tenant_id text NOT NULL,
    run_id uuid NOT NULL,
    seq integer NOT NULL,
    data jsonb NOT NULL
);

--
-- Name: run_event_payloads_p09; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.run_event_payloads_p09 (
    tenant_id text NOT NULL,
    run_id uuid NOT NULL,
    seq integer NOT NULL,
    data jsonb NOT NULL
);

--
-- Name: run_event_payloads_p10; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.run_event_payloads_p10 (
    tenant_id text NOT NULL,
    run_id uuid NOT NULL,
    seq integer NOT NULL,
    data jsonb NOT NULL
);

--
-- Name: run_event_payloads_p11; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.run_event_payloads_p11 (
    tenant_id text NOT NULL,
    run_id uuid NOT NULL,
    seq integer NOT NULL,
    data jsonb NOT NULL
);

--
-- Name: run_event_payloads_p12; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.run_event_payloads_p12 (
    tenant_id text NOT NULL,
    run_id uuid NOT NULL,
    seq integer NOT NULL,
    data jsonb NOT NULL
);

--
-- Name: run_event_payloads_p13; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.run_event_payloads_p13 (
    tenant_id text NOT NULL,
    run_id uuid NOT NULL,
    seq integer NOT NULL,
    data jsonb NOT NULL
);

--
-- Name: run_event_payloads_p14; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.run_event_payloads_p14 (
    tenant_id text NOT NULL,
    run_id uuid NOT NULL,
    seq integer NOT NULL,
    data jsonb NOT NULL
);

--
-- Name: run_event_payloads_p15; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.run_event_payloads_p15 (
    tenant_id text NOT NULL,
    run_id uuid NOT NULL,
    seq integer NOT NULL,
    data jsonb NOT NULL
);

--
-- Name: run_event_payloads_p16; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.run_event_payloads_p16 (
    tenant_id text NOT NULL,
    run_id uuid NOT NULL,
    seq integer NOT NULL,
    data jsonb NOT NULL
);

--
-- Name: run_event_payloads_p17; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.run_event_payloads_p17 (
    tenant_id text NOT NULL,
    run_id uuid NOT NULL,
    seq integer NOT NULL,
    data jsonb NOT NULL
);

--
-- Name: run_event_payloads_p18; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.run_event_payloads_p18 (
    tenant_id text NOT NULL,
    run_id uuid NOT NULL,
    seq integer NOT NULL,
    data jsonb NOT NULL
);

--
-- Name: run_event_payloads_p19; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.run_event_payloads_p19 (
    tenant_id text NOT NULL,
    run_id uuid NOT NULL,
    seq integer NOT NULL,
    data jsonb NOT NULL
);

--
-- Name: run_event_payloads_p20; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.run_event_payloads_p20 (
    tenant_id text NOT NULL,
    run_id uuid NOT NULL,
    seq integer NOT NULL,
    data jsonb NOT NULL
);

--
-- Name: run_event_payloads_p21; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.run_event_payloads_p21 (
    tenant_id text NOT NULL,
    run_id uuid NOT NULL,
    seq integer NOT NULL,
    data jsonb NOT NULL
);

--
-- Name: run_event_payloads_p22; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.run_event_payloads_p22 (
    tenant_id text NOT NULL,
    run_id uuid NOT NULL,
    seq integer NOT NULL,
    data jsonb NOT NULL
);

--
-- Name: run_event_payloads_p23; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.run_event_payloads_p23 (
    tenant_id text NOT NULL,
    run_id uuid NOT NULL,
    seq integer NOT NULL,
    data jsonb NOT NULL
);

--
-- Name: run_event_payloads_p24; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.run_event_payloads_p24 (
    tenant_id text NOT NULL,
    run_id uuid NOT NULL,
    seq integer NOT NULL,
    data jsonb NOT NULL
);

--
-- Name: run_event_payloads_p25; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.run_event_payloads_p25 (
    tenant_id text NOT NULL,
    run_id uuid NOT NULL,
    seq integer NOT NULL,
    data jsonb NOT NULL
);

--
-- Name: run_event_payloads_p26; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.run_event_payloads_p26 (
    tenant_id text NOT NULL,
    run_id uuid NOT NULL,
    seq integer NOT NULL,
    data jsonb NOT NULL
);

--
-- Name: run_event_payloads_p27; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.run_event_payloads_p27 (
    tenant_id text NOT NULL,
    run_id uuid NOT NULL,
    seq integer NOT NULL,
    data jsonb NOT NULL
);

--
-- Name: run_event_payloads_p28; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.run_event_payloads_p28 (
    tenant_id text NOT NULL,
    run_id uuid NOT NULL,
    seq integer NOT NULL,
    data jsonb NOT NULL
);

--
-- Name: run_event_payloads_p29; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.run_event_payloads_p29 (
    tenant_id text NOT NULL,
    run_id uuid NOT NULL,
    seq integer NOT NULL,
    data jsonb NOT NULL
);

--
-- Name: run_event_payloads_p30; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.run_event_payloads_p30 (
    tenant_id text NOT NULL,
    run_id uuid NOT NULL,
    seq integer NOT NULL,
    data jsonb NOT NULL
);

--
-- Name: run_event_payloads_p31; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.run_event_payloads_p31 (
    tenant_id text NOT NULL,
    run_id uuid NOT NULL,
    seq integer NOT NULL,
    data jsonb NOT NULL
);

--
-- Name: run_events; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.run_events (
    tenant_id text NOT NULL,
    run_id uuid NOT NULL,
    seq integer NOT NULL,
    type text NOT NULL,
    data jsonb NOT NULL,
    format smallint DEFAULT 1 NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT run_events_data_check CHECK ((octet_length((data)::text) <= 8192)),
    CONSTRAINT run_events_seq_check CHECK ((seq >= 1))
)
PARTITION BY HASH (run_id);

--
-- Name: run_events_p00; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.run_events_p00 (
    tenant_id text NOT NULL,
    run_id uuid NOT NULL,
    seq integer NOT NULL,
    type text NOT NULL,
    data jsonb NOT NULL,
    format smallint DEFAULT 1 NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT run_events_data_check CHECK ((octet_length((data)::text) <= 8192)),
    CONSTRAINT run_events_seq_check CHECK ((seq >= 1))
);

--
-- Name: run_events_p01; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.run_events_p01 (
    tenant_id text NOT NULL,
    run_id uuid NOT NULL,
    seq integer NOT NULL,
    type text NOT NULL,
    data jsonb NOT NULL,
    format smallint DEFAULT 1 NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT run_events_data_check CHECK ((octet_length((data)::text) <= 8192)),
    CONSTRAINT run_events_seq_check CHECK ((seq >= 1))
);

--
-- Name: run_events_p02; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.run_events_p02 (
    tenant_id text NOT NULL,
    run_id uuid NOT NULL,
    seq integer NOT NULL,
    type text NOT NULL,
    data jsonb NOT NULL,
    format smallint DEFAULT 1 NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT run_events_data_check CHECK ((octet_length((data)::text) <= 8192)),
    CONSTRAINT run_events_seq_check CHECK ((seq >= 1))
);

--
-- Name: run_events_p03; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.run_events_p03 (
    tenant_id text NOT NULL,
    run_id uuid NOT NULL,
    seq integer NOT NULL,
    type text NOT NULL,
    data jsonb NOT NULL,
    format smallint DEFAULT 1 NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT run_events_data_check CHECK ((octet_length((data)::text) <= 8192)),
    CONSTRAINT run_events_seq_check CHECK ((seq >= 1))
);

--
-- Name: run_events_p04; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.run_events_p04 (
    tenant_id text NOT NULL,
    run_id uuid NOT NULL,
    seq integer NOT NULL,
    type text NOT NULL,
    data jsonb NOT NULL,
    format smallint DEFAULT 1 NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT run_events_data_check CHECK ((octet_length((data)::text) <= 8192)),
    CONSTRAINT run_events_seq_check CHECK ((seq >= 1))
);

--
-- Name: run_events_p05; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.run_events_p05 (
    tenant_id text NOT NULL,
    run_id uuid NOT NULL,
    seq integer NOT NULL,
    type text NOT NULL,
    data jsonb NOT NULL,
    format smallint DEFAULT 1 NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT run_events_data_check CHECK ((octet_length((data)::text) <= 8192)),
    CONSTRAINT run_events_seq_check CHECK ((seq >= 1))
);

--
-- Name: run_events_p06; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.run_events_p06 (
    tenant_id text NOT NULL,
    run_id uuid NOT NULL,
    seq integer NOT NULL,
    type text NOT NULL,
    data jsonb NOT NULL,
    format smallint DEFAULT 1 NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT run_events_data_check CHECK ((octet_length((data)::text) <= 8192)),
    CONSTRAINT run_events_seq_check CHECK ((seq >= 1))
);

--
-- Name: run_events_p07; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.run_events_p07 (
    tenant_id text NOT NULL,
    run_id uuid NOT NULL,
    seq integer NOT NULL,
    type text NOT NULL,
    data jsonb NOT NULL,
    format smallint DEFAULT 1 NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT run_events_data_check CHECK ((octet_length((data)::text) <= 8192)),
    CONSTRAINT run_events_seq_check CHECK ((seq >= 1))
);

--
-- Name: run_events_p08; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.run_events_p08 (
    tenant_id text NOT NULL,
    run_id uuid NOT NULL,
    seq integer NOT NULL,
    type text NOT NULL,
    data jsonb NOT NULL,
    format smallint DEFAULT 1 NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT run_events_data_check CHECK ((octet_length((data)::text) <= 8192)),
    CONSTRAINT run_events_seq_check CHECK ((seq >= 1))
);

--
-- Name: run_events_p09; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.run_events_p09 (
    tenant_id text NOT NULL,
    run_id uuid NOT NULL,
    seq integer NOT NULL,
    type text NOT NULL,
    data jsonb NOT NULL,
    format smallint DEFAULT 1 NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT run_events_data_check CHECK ((octet_length((data)::text) <= 8192)),
    CONSTRAINT run_events_seq_check CHECK ((seq >= 1))
);

--
-- Name: run_events_p10; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.run_events_p10 (
    tenant_id text NOT NULL,
    run_id uuid NOT NULL,
    seq integer NOT NULL,
    type text NOT NULL,
    data jsonb NOT NULL,
    format smallint DEFAULT 1 NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT run_events_data_check CHECK ((octet_length((data)::text) <= 8192)),
    CONSTRAINT run_events_seq_check CHECK ((seq >= 1))
);

--
-- Name: run_events_p11; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.run_events_p11 (
    tenant_id text NOT NULL,
    run_id uuid NOT NULL,
    seq integer NOT NULL,
    type text NOT NULL,
    data jsonb NOT NULL,
    format smallint DEFAULT 1 NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT run_events_data_check CHECK ((octet_length((data)::text) <= 8192)),
    CONSTRAINT run_events_seq_check CHECK ((seq >= 1))
);

--
-- Name: run_events_p12; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.run_events_p12 (
    tenant_id text NOT NULL,
    run_id uuid NOT NULL,
    seq integer NOT NULL,
    type text NOT NULL,
    data jsonb NOT NULL,
    format smallint DEFAULT 1 NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT run_events_data_check CHECK ((octet_length((data)::text) <= 8192)),
    CONSTRAINT run_events_seq_check CHECK ((seq >= 1))
);

--
-- Name: run_events_p13; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.run_events_p13 (
    tenant_id text NOT NULL,
    run_id uuid NOT NULL,
    seq integer NOT NULL,
    type text NOT NULL,
    data jsonb NOT NULL,
    format smallint DEFAULT 1 NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT run_events_data_check CHECK ((octet_length((data)::text) <= 8192)),
    CONSTRAINT run_events_seq_check CHECK ((seq >= 1))
);

--
-- Name: run_events_p14; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.run_events_p14 (
    tenant_id text NOT NULL,
    run_id uuid NOT NULL,
    seq integer NOT NULL,
    type text NOT NULL,
    data jsonb NOT NULL,
    format smallint DEFAULT 1 NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT run_events_data_check CHECK ((octet_length((data)::text) <= 8192)),
    CONSTRAINT run_events_seq_check CHECK ((seq >= 1))
);

--
-- Name: run_events_p15; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.run_events_p15 (
    tenant_id text NOT NULL,
    run_id uuid NOT NULL,
    seq integer NOT NULL,
    type text NOT NULL,
    data jsonb NOT NULL,
    format smallint DEFAULT 1 NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT run_events_data_check CHECK ((octet_length((data)::text) <= 8192)),
    CONSTRAINT run_events_seq_check CHECK ((seq >= 1))
);

--
-- Name: run_events_p16; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.run_events_p16 (
    tenant_id text NOT NULL,
    run_id uuid NOT NULL,
    seq integer NOT NULL,
    type text NOT NULL,
    data jsonb NOT NULL,
    format smallint DEFAULT 1 NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT run_events_data_check CHECK ((octet_length((data)::text) <= 8192)),
    CONSTRAINT run_events_seq_check CHECK ((seq >= 1))
);

--
-- Name: run_events_p17; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.run_events_p17 (
    tenant_id text NOT NULL,
    run_id uuid NOT NULL,
    seq integer NOT NULL,
    type text NOT NULL,
    data jsonb NOT NULL,
    format smallint DEFAULT 1 NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT run_events_data_check CHECK ((octet_length((data)::text) <= 8192)),
    CONSTRAINT run_events_seq_check CHECK ((seq >= 1))
);

--
-- Name: run_events_p18; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.run_events_p18 (
    tenant_id text NOT NULL,
    run_id uuid NOT NULL,
    seq integer NOT NULL,
    type text NOT NULL,
    data jsonb NOT NULL,
    format smallint DEFAULT 1 NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT run_events_data_check CHECK ((octet_length((data)::text) <= 8192)),
    CONSTRAINT run_events_seq_check CHECK ((seq >= 1))
);

--
-- Name: run_events_p19; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.run_events_p19 (
    tenant_id text NOT NULL,
    run_id uuid NOT NULL,
    seq integer NOT NULL,
    type text NOT NULL,
    data jsonb NOT NULL,
    format smallint DEFAULT 1 NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT run_events_data_check CHECK ((octet_length((data)::text) <= 8192)),
    CONSTRAINT run_events_seq_check CHECK ((seq >= 1))
);

--
-- Name: run_events_p20; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.run_events_p20 (
    tenant_id text NOT NULL,
    run_id uuid NOT NULL,
    seq integer NOT NULL,
    type text NOT NULL,
    data jsonb NOT NULL,
    format smallint DEFAULT 1 NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT run_events_data_check CHECK ((octet_length((data)::text) <= 8192)),
    CONSTRAINT run_events_seq_check CHECK ((seq >= 1))
);

--
-- Name: run_events_p21; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.run_events_p21 (
    tenant_id text NOT NULL,
    run_id uuid NOT NULL,
    seq integer NOT NULL,
    type text NOT NULL,
    data jsonb NOT NULL,
    format smallint DEFAULT 1 NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT run_events_data_check CHECK ((octet_length((data)::text) <= 8192)),
    CONSTRAINT run_events_seq_check CHECK ((seq >= 1))
);

--
-- Name: run_events_p22; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.run_events_p22 (
    tenant_id text NOT NULL,
    run_id uuid NOT NULL,
    seq integer NOT NULL,
    type text NOT NULL,
    data jsonb NOT NULL,
    format smallint DEFAULT 1 NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT run_events_data_check CHECK ((octet_length((data)::text) <= 8192)),
    CONSTRAINT run_events_seq_check CHECK ((seq >= 1))
);

--
-- Name: run_events_p23; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.run_events_p23 (
    tenant_id text NOT NULL,
    run_id uuid NOT NULL,
    seq integer NOT NULL,
    type text NOT NULL,
    data jsonb NOT NULL,
    format smallint DEFAULT 1 NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT run_events_data_check CHECK ((octet_length((data)::text) <= 8192)),
    CONSTRAINT run_events_seq_check CHECK ((seq >= 1))
);

--
-- Name: run_events_p24; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.run_events_p24 (
    tenant_id text NOT NULL,
    run_id uuid NOT NULL,
    seq integer NOT NULL,
    type text NOT NULL,
    data jsonb NOT NULL,
    format smallint DEFAULT 1 NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT run_events_data_check CHECK ((octet_length((data)::text) <= 8192)),
    CONSTRAINT run_events_seq_check CHECK ((seq >= 1))
);

--
-- Name: run_events_p25; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.run_events_p25 (
    tenant_id text NOT NULL,
    run_id uuid NOT NULL,
    seq integer NOT NULL,
    type text NOT NULL,
    data jsonb NOT NULL,
    format smallint DEFAULT 1 NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT run_events_data_check CHECK ((octet_length((data)::text) <= 8192)),
    CONSTRAINT run_events_seq_check CHECK ((seq >= 1))
);

--
-- Name: run_events_p26; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.run_events_p26 (
    tenant_id text NOT NULL,
    run_id uuid NOT NULL,
    seq integer NOT NULL,
    type text NOT NULL,
    data jsonb NOT NULL,
    format smallint DEFAULT 1 NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT run_events_data_check CHECK ((octet_length((data)::text) <= 8192)),
    CONSTRAINT run_events_seq_check CHECK ((seq >= 1))
);

--
-- Name: run_events_p27; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.run_events_p27 (
    tenant_id text NOT NULL,
    run_id uuid NOT NULL,
    seq integer NOT NULL,
    type text NOT NULL,
    data jsonb NOT NULL,
    format smallint DEFAULT 1 NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT run_events_data_check CHECK ((octet_length((data)::text) <= 8192)),
    CONSTRAINT run_events_seq_check CHECK ((seq >= 1))
);

--
-- Name: run_events_p28; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.run_events_p28 (
    tenant_id text NOT NULL,
    run_id uuid NOT NULL,
    seq integer NOT NULL,
    type text NOT NULL,
    data jsonb NOT NULL,
    format smallint DEFAULT 1 NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT run_events_data_check CHECK ((octet_length((data)::text) <= 8192)),
    CONSTRAINT run_events_seq_check CHECK ((seq >= 1))
);

--
-- Name: run_events_p29; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.run_events_p29 (
    tenant_id text NOT NULL,
    run_id uuid NOT NULL,
    seq integer NOT NULL,
    type text NOT NULL,
    data jsonb NOT NULL,
    format smallint DEFAULT 1 NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT run_events_data_check CHECK ((octet_length((data)::text) <= 8192)),
    CONSTRAINT run_events_seq_check CHECK ((seq >= 1))
);

--
-- Name: run_events_p30; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.run_events_p30 (
    tenant_id text NOT NULL,
    run_id uuid NOT NULL,
    seq integer NOT NULL,
    type text NOT NULL,
    data jsonb NOT NULL,
    format smallint DEFAULT 1 NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT run_events_data_check CHECK ((octet_length((data)::text) <= 8192)),
    CONSTRAINT run_events_seq_check CHECK ((seq >= 1))
);

--
-- Name: run_events_p31; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.run_events_p31 (
    tenant_id text NOT NULL,
    run_id uuid NOT NULL,
    seq integer NOT NULL,
    type text NOT NULL,
    data jsonb NOT NULL,
    format smallint DEFAULT 1 NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT run_events_data_check CHECK ((octet_length((data)::text) <= 8192)),
    CONSTRAINT run_events_seq_check CHECK ((seq >= 1))
);

--
-- Name: run_status_totals; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.run_status_totals (
    tenant_id text NOT NULL,
    status text NOT NULL,
    runs bigint DEFAULT 0 NOT NULL,
    CONSTRAINT run_status_totals_runs_check CHECK ((runs >= 0)),
    CONSTRAINT run_status_totals_status_check CHECK ((status = ANY (ARRAY['finished'::text, 'failed'::text, 'cancelled'::text])))
);

--
-- Name: runs; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.runs (
    tenant_id text NOT NULL,
    run_id uuid NOT NULL,
    agent_id uuid NOT NULL,
    agent_version integer NOT NULL,
    status text DEFAULT 'queued'::text NOT NULL,
    input jsonb NOT NULL,
    idempotency_key text,
    request_sha256 bytea NOT NULL,
    webhook_url text,
    priority text DEFAULT 'interactive'::text NOT NULL,
    parent_run_id uuid,
    lease_owner text,
    lease_epoch bigint DEFAULT 0 NOT NULL,
    lease_expires_at timestamp with time zone,
    last_seq integer DEFAULT 0 NOT NULL,
    cancel_requested boolean DEFAULT false NOT NULL,
    answer jsonb,
    error jsonb,
    input_tokens bigint DEFAULT 0 NOT NULL,
    output_tokens bigint DEFAULT 0 NOT NULL,
    cost_micros bigint DEFAULT 0 NOT NULL,
    steps integer DEFAULT 0 NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    finished_at timestamp with time zone,
    available_at timestamp with time zone,
    webhook_state text,
    webhook_attempts integer DEFAULT 0 NOT NULL,
    webhook_next_at timestamp with time zone,
    parked_on text[],
    started_at timestamp with time zone,
    kind text DEFAULT 'agent'::text NOT NULL,
    waiting_cap_micros bigint,
    waiting_tool_server uuid,
    CONSTRAINT runs_idempotency_key_check CHECK (((length(idempotency_key) >= 1) AND (length(idempotency_key) <= 255))),
    CONSTRAINT runs_kind_check CHECK ((kind = ANY (ARRAY['agent'::text, 'task'::text, 'activity'::text]))),
    CONSTRAINT runs_priority_check CHECK ((priority = ANY (ARRAY['interactive'::text, 'batch'::text]))),
    CONSTRAINT runs_status_check CHECK ((status = ANY (ARRAY['queued'::text, 'running'::text, 'waiting'::text, 'finished'::text, 'failed'::text, 'cancelled'::text]))),
    CONSTRAINT runs_webhook_state_check CHECK ((webhook_state = ANY (ARRAY['pending'::text, 'delivered'::text, 'failed'::text])))
);

--
-- Name: sandbox_usage_facts; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.sandbox_usage_facts (
    tenant_id text NOT NULL,
    run_id uuid NOT NULL,
    seq integer NOT NULL,
    agent_id uuid NOT NULL,
    agent_version integer NOT NULL,
    backend text NOT NULL,
    sandbox_ms bigint NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    cost_micros bigint NOT NULL,
    price_version text NOT NULL,
    attempt integer,
    activity text,
    activity_version integer,
    cpu_us bigint,
    peak_memory_bytes bigint,
    CONSTRAINT sandbox_usage_facts_activity_version_check CHECK ((activity_version >= 1)),
    CONSTRAINT sandbox_usage_facts_activity_whole CHECK ((((attempt IS NULL) = (activity IS NULL)) AND ((attempt IS NULL) = (activity_version IS NULL)) AND ((attempt IS NOT NULL) OR ((cpu_us IS NULL) AND (peak_memory_bytes IS NULL))))),
    CONSTRAINT sandbox_usage_facts_attempt_check CHECK ((attempt >= 1)),
    CONSTRAINT sandbox_usage_facts_cost_micros_check CHECK ((cost_micros >= 0)),
    CONSTRAINT sandbox_usage_facts_cpu_us_check CHECK ((cpu_us >= 0)),
    CONSTRAINT sandbox_usage_facts_peak_memory_bytes_check CHECK ((peak_memory_bytes >= 0)),
    CONSTRAINT sandbox_usage_facts_sandbox_ms_check CHECK ((sandbox_ms >= 0))
);

--
-- Name: schema_contract_steps; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.schema_contract_steps (
    version integer NOT NULL,
    name text NOT NULL,
    sha256 text NOT NULL,
    applied_at timestamp with time zone DEFAULT now() NOT NULL
);

--
-- Name: schema_migrations; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.schema_migrations (
    version integer NOT NULL,
    name text NOT NULL,
    sha256 text NOT NULL,
    applied_at timestamp with time zone DEFAULT now() NOT NULL
);

--
-- Name: schema_releases; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.schema_releases (
    release text NOT NULL,
    migrated_at timestamp with time zone DEFAULT now() NOT NULL,
    contracted_at timestamp with time zone
);

--
-- Name: schema_routines; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.schema_routines (
    name text NOT NULL,
    sha256 text NOT NULL,
    applied_at timestamp with time zone DEFAULT now() NOT NULL
);

--
-- Name: secrets; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.secrets (
    tenant_id text NOT NULL,
    name text NOT NULL,
    ciphertext bytea NOT NULL,
    nonce bytea NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT secrets_name_check CHECK ((name ~ '^[A-Za-z0-9_.-]{1,128}$'::text))
);

--
-- Name: sign_in_links; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.sign_in_links (
    tenant_id text NOT NULL,
    link_hash bytea NOT NULL,
    user_id uuid NOT NULL,
    created_by text NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    expires_at timestamp with time zone NOT NULL,
    used_at timestamp with time zone,
    CONSTRAINT sign_in_links_created_by_check CHECK (((length(created_by) >= 1) AND (length(created_by) <= 200))),
    CONSTRAINT sign_in_links_link_hash_check CHECK ((octet_length(link_hash) = 32))
);

--
-- Name: tenant_keys; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.tenant_keys (
    tenant_id text NOT NULL,
    wrapped_key bytea NOT NULL,
    nonce bytea NOT NULL,
    master_key_id text NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    rotated_at timestamp with time zone
);

--
-- Name: tenant_users; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.tenant_users (
    tenant_id text NOT NULL,
    user_id uuid NOT NULL,
    email text NOT NULL,
    role text NOT NULL,
    created_by text NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    disabled_at timestamp with time zone,
    oidc_issuer text,
    oidc_subject text,
    CONSTRAINT tenant_users_created_by_check CHECK (((length(created_by) >= 1) AND (length(created_by) <= 200))),
    CONSTRAINT tenant_users_email_check CHECK (((length(email) >= 3) AND (length(email) <= 254))),
    CONSTRAINT tenant_users_identity_whole CHECK (((oidc_issuer IS NULL) = (oidc_subject IS NULL))),
    CONSTRAINT tenant_users_oidc_issuer_check CHECK (((length(oidc_issuer) >= 1) AND (length(oidc_issuer) <= 2048))),
    CONSTRAINT tenant_users_oidc_subject_check CHECK (((length(oidc_subject) >= 1) AND (length(oidc_subject) <= 255))),
    CONSTRAINT tenant_users_role_check CHECK ((role = ANY (ARRAY['viewer'::text, 'approver'::text, 'developer'::text, 'admin'::text])))
);

--
-- Name: tenants; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.tenants (
    tenant_id text NOT NULL,
    name text NOT NULL,
    region text DEFAULT 'default'::text NOT NULL,
    plan text DEFAULT 'standard'::text NOT NULL,
    home_cell text DEFAULT 'local'::text NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    webhook_secret text DEFAULT encode(sha256((((gen_random_uuid())::text)::bytea || ((gen_random_uuid())::text)::bytea)), 'hex'::text) NOT NULL,
    approval_ttl_seconds integer DEFAULT 604800 NOT NULL,
    erased_at timestamp with time zone,
    admissions_paused_at timestamp with time zone,
    webhook_secret_previous text,
    webhook_secret_previous_until timestamp with time zone,
    CONSTRAINT tenants_approval_ttl_seconds_check CHECK ((approval_ttl_seconds > 0)),
    CONSTRAINT tenants_name_check CHECK (((length(name) >= 1) AND (length(name) <= 200))),
    CONSTRAINT tenants_tenant_id_check CHECK ((tenant_id ~ '^[a-z0-9][a-z0-9_-]{2,63}$'::text))
);

--
-- Name: test_case_sources; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.test_case_sources (
    tenant_id text NOT NULL,
    test_set_id uuid NOT NULL,
    case_index integer NOT NULL,
    run_id uuid NOT NULL,
    input jsonb,
    recorded jsonb DEFAULT '[]'::jsonb NOT NULL,
    CONSTRAINT test_case_sources_case_index_check CHECK ((case_index >= 0))
);

--
-- Name: tombstones; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.tombstones (
    tenant_id text NOT NULL,
    run_id uuid NOT NULL,
    kind text NOT NULL,
    agent_id uuid NOT NULL,
    agent_version integer NOT NULL,
    parent_run_id uuid,
    status text NOT NULL,
    created_at timestamp with time zone NOT NULL,
    started_at timestamp with time zone,
    ended_at timestamp with time zone NOT NULL,
    steps integer NOT NULL,
    events integer NOT NULL,
    input_tokens bigint NOT NULL,
    output_tokens bigint NOT NULL,
    cost_micros bigint NOT NULL,
    idempotency_key_sha256 bytea,
    reason text NOT NULL,
    deleted_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT tombstones_reason_check CHECK ((reason = ANY (ARRAY['retention'::text, 'request'::text, 'erase'::text]))),
    CONSTRAINT tombstones_status_check CHECK ((status = ANY (ARRAY['finished'::text, 'failed'::text, 'cancelled'::text, 'dead_lettered'::text])))
);

--
-- Name: tool_server_oauth; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.tool_server_oauth (
    tenant_id text NOT NULL,
    server_id uuid NOT NULL,
    status text NOT NULL,
    reason text,
    grant_type text DEFAULT 'authorization_code'::text NOT NULL,
    resource text NOT NULL,
    authorization_server jsonb NOT NULL,
    scope text,
    step_ups integer DEFAULT 0 NOT NULL,
    client_id text,
    client_auth_method text,
    client_secret bytea,
    client_secret_nonce bytea,
    access_token bytea,
    access_token_nonce bytea,
    access_expires_at timestamp with time zone,
    refresh_token bytea,
    refresh_token_nonce bytea,
    flow_state text,
    flow_verifier bytea,
    flow_verifier_nonce bytea,
    flow_redirect_uri text,
    flow_expires_at timestamp with time zone,
    connected_at timestamp with time zone,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT tool_server_oauth_grant_type_check CHECK ((grant_type = ANY (ARRAY['authorization_code'::text, 'client_credentials'::text]))),
    CONSTRAINT tool_server_oauth_status_check CHECK ((status = ANY (ARRAY['authorization_required'::text, 'connected'::text])))
);

--
-- Name: tool_servers; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.tool_servers (
    tenant_id text NOT NULL,
    server_id uuid NOT NULL,
    name text NOT NULL,
    url text NOT NULL,
    honours_idempotency_keys boolean NOT NULL,
    secret_name text,
    tools jsonb NOT NULL,
    tools_sha256 bytea NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    secret_ref text,
    call_timeout_seconds integer DEFAULT 30 NOT NULL,
    registered_by text DEFAULT 'operator'::text NOT NULL,
    speaks_modern boolean,
    CONSTRAINT tool_servers_call_timeout_seconds_check CHECK (((call_timeout_seconds >= 1) AND (call_timeout_seconds <= 3600))),
    CONSTRAINT tool_servers_registered_by_check CHECK ((registered_by = ANY (ARRAY['operator'::text, 'tenant'::text])))
);

--
-- Name: usage_facts; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.usage_facts (
    tenant_id text NOT NULL,
    run_id uuid NOT NULL,
    seq integer NOT NULL,
    agent_id uuid NOT NULL,
    agent_version integer NOT NULL,
    provider text NOT NULL,
    account text NOT NULL,
    model text NOT NULL,
    input_tokens bigint NOT NULL,
    cached_input_tokens bigint NOT NULL,
    cache_write_input_tokens bigint NOT NULL,
    output_tokens bigint NOT NULL,
    cost_micros bigint NOT NULL,
    price_version text NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    account_owner text
);

--
-- Name: webhook_attempts; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.webhook_attempts (
    tenant_id text NOT NULL,
    delivery_id uuid NOT NULL,
    run_id uuid NOT NULL,
    endpoint_id uuid,
    url text NOT NULL,
    attempt integer NOT NULL,
    attempted_at timestamp with time zone DEFAULT now() NOT NULL,
    outcome text NOT NULL,
    status_code integer,
    error text,
    CONSTRAINT webhook_attempts_attempt_check CHECK ((attempt >= 1)),
    CONSTRAINT webhook_attempts_outcome_check CHECK ((outcome = ANY (ARRAY['delivered'::text, 'retrying'::text, 'failed'::text])))
);

--
-- Name: webhook_endpoints; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.webhook_endpoints (
    tenant_id text NOT NULL,
    endpoint_id uuid NOT NULL,
    slot smallint NOT NULL,
    url text NOT NULL,
    statuses text[],
    agent_ids uuid[],
    description text,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT webhook_endpoints_agent_ids_check CHECK (((cardinality(agent_ids) >= 1) AND (cardinality(agent_ids) <= 20))),
    CONSTRAINT webhook_endpoints_description_check CHECK ((length(description) <= 200)),
    CONSTRAINT webhook_endpoints_slot_check CHECK (((slot >= 1) AND (slot <= 10))),
    CONSTRAINT webhook_endpoints_statuses_check CHECK (((statuses <@ ARRAY['finished'::text, 'failed'::text, 'cancelled'::text]) AND ((cardinality(statuses) >= 1) AND (cardinality(statuses) <= 3)))),
    CONSTRAINT webhook_endpoints_url_check CHECK (((length(url) >= 1) AND (length(url) <= 2048)))
);

--
-- Name: worker_sessions; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.worker_sessions (
    worker_id text NOT NULL,
    lock_key integer NOT NULL,
    started_at timestamp with time zone DEFAULT now() NOT NULL,
    locked_at timestamp with time zone DEFAULT now() NOT NULL,
    release text DEFAULT '0.1.0'::text NOT NULL
);

--
-- Name: run_event_payloads_p00; Type: TABLE ATTACH; Schema: public; Owner: -
--

ALTER TABLE ONLY public.run_event_payloads ATTACH PARTITION public.run_event_payloads_p00 FOR VALUES WITH (modulus 32, remainder 0);

--
-- Name: run_event_payloads_p01; Type: TABLE ATTACH; Schema: public; Owner: -
--

ALTER TABLE ONLY public.run_event_payloads ATTACH PARTITION public.run_event_payloads_p01 FOR VALUES WITH (modulus 32, remainder 1);

--
-- Name: run_event_payloads_p02; Type: TABLE ATTACH; Schema: public; Owner: -
--

ALTER TABLE ONLY public.run_event_payloads ATTACH PARTITION public.run_event_payloads_p02 FOR VALUES WITH (modulus 32, remainder 2);

--
-- Name: run_event_payloads_p03; Type: TABLE ATTACH; Schema: public; Owner: -
--

ALTER TABLE ONLY public.run_event_payloads ATTACH PARTITION public.run_event_payloads_p03 FOR VALUES WITH (modulus 32, remainder 3);

--
-- Name: run_event_payloads_p04; Type: TABLE ATTACH; Schema: public; Owner: -
--

ALTER TABLE ONLY public.run_event_payloads ATTACH PARTITION public.run_event_payloads_p04 FOR VALUES WITH (modulus 32, remainder 4);

--
-- Name: run_event_payloads_p05; Type: TABLE ATTACH; Schema: public; Owner: -
--

ALTER TABLE ONLY public.run_event_payloads ATTACH PARTITION public.run_event_payloads_p05 FOR VALUES WITH (modulus 32, remainder 5);

--
-- Name: run_event_payloads_p06; Type: TABLE ATTACH; Schema: public; Owner: -
--

ALTER TABLE ONLY public.run_event_payloads ATTACH PARTITION public.run_event_payloads_p06 FOR VALUES WITH (modulus 32, remainder 6);

--
-- Name: run_event_payloads_p07; Type: TABLE ATTACH; Schema: public; Owner: -
--

ALTER TABLE ONLY public.run_event_payloads ATTACH PARTITION public.run_event_payloads_p07 FOR VALUES WITH (modulus 32, remainder 7);

--
-- Name: run_event_payloads_p08; Type: TABLE ATTACH; Schema: public; Owner: -
--

ALTER TABLE ONLY public.run_event_payloads ATTACH PARTITION public.run_event_payloads_p08 FOR VALUES WITH (modulus 32, remainder 8);

--
-- Name: run_event_payloads_p09; Type: TABLE ATTACH; Schema: public; Owner: -
--

ALTER TABLE ONLY public.run_event_payloads ATTACH PARTITION public.run_event_payloads_p09 FOR VALUES WITH (modulus 32, remainder 9);

--
-- Name: run_event_payloads_p10; Type: TABLE ATTACH; Schema: public; Owner: -
--

ALTER TABLE ONLY public.run_event_payloads ATTACH PARTITION public.run_event_payloads_p10 FOR VALUES WITH (modulus 32, remainder 10);

--
-- Name: run_event_payloads_p11; Type: TABLE ATTACH; Schema: public; Owner: -
--

ALTER TABLE ONLY public.run_event_payloads ATTACH PARTITION public.run_event_payloads_p11 FOR VALUES WITH (modulus 32, remainder 11);

--
-- Name: run_event_payloads_p12; Type: TABLE ATTACH; Schema: public; Owner: -
--

ALTER TABLE ONLY public.run_event_payloads ATTACH PARTITION public.run_event_payloads_p12 FOR VALUES WITH (modulus 32, remainder 12);

--
-- Name: run_event_payloads_p13; Type: TABLE ATTACH; Schema: public; Owner: -
--

ALTER TABLE ONLY public.run_event_payloads ATTACH PARTITION public.run_event_payloads_p13 FOR VALUES WITH (modulus 32, remainder 13);

--
-- Name: run_event_payloads_p14; Type: TABLE ATTACH; Schema: public; Owner: -
--

ALTER TABLE ONLY public.run_event_payloads ATTACH PARTITION public.run_event_payloads_p14 FOR VALUES WITH (modulus 32, remainder 14);

--
-- Name: run_event_payloads_p15; Type: TABLE ATTACH; Schema: public; Owner: -
--

ALTER TABLE ONLY public.run_event_payloads ATTACH PARTITION public.run_event_payloads_p15 FOR VALUES WITH (modulus 32, remainder 15);

--
-- Name: run_event_payloads_p16; Type: TABLE ATTACH; Schema: public; Owner: -
--

ALTER TABLE ONLY public.run_event_payloads ATTACH PARTITION public.run_event_payloads_p16 FOR VALUES WITH (modulus 32, remainder 16);

--
-- Name: run_event_payloads_p17; Type: TABLE ATTACH; Schema: public; Owner: -
--

ALTER TABLE ONLY public.run_event_payloads ATTACH PARTITION public.run_event_payloads_p17 FOR VALUES WITH (modulus 32, remainder 17);

--
-- Name: run_event_payloads_p18; Type: TABLE ATTACH; Schema: public; Owner: -
--

ALTER TABLE ONLY public.run_event_payloads ATTACH PARTITION public.run_event_payloads_p18 FOR VALUES WITH (modulus 32, remainder 18);

--
-- Name: run_event_payloads_p19; Type: TABLE ATTACH; Schema: public; Owner: -
--

ALTER TABLE ONLY public.run_event_payloads ATTACH PARTITION public.run_event_payloads_p19 FOR VALUES WITH (modulus 32, remainder 19);

--
-- Name: run_event_payloads_p20; Type: TABLE ATTACH; Schema: public; Owner: -
--

ALTER TABLE ONLY public.run_event_payloads ATTACH PARTITION public.run_event_payloads_p20 FOR VALUES WITH (modulus 32, remainder 20);

--
-- Name: run_event_payloads_p21; Type: TABLE ATTACH; Schema: public; Owner: -
--

ALTER TABLE ONLY public.run_event_payloads ATTACH PARTITION public.run_event_payloads_p21 FOR VALUES WITH (modulus 32, remainder 21);

--
-- Name: run_event_payloads_p22; Type: TABLE ATTACH; Schema: public; Owner: -
--

ALTER TABLE ONLY public.run_event_payloads ATTACH PARTITION public.run_event_payloads_p22 FOR VALUES WITH (modulus 32, remainder 22);

--
-- Name: run_event_payloads_p23; Type: TABLE ATTACH; Schema: public; Owner: -
--

ALTER TABLE ONLY public.run_event_payloads ATTACH PARTITION public.run_event_payloads_p23 FOR VALUES WITH (modulus 32, remainder 23);

--
-- Name: run_event_payloads_p24; Type: TABLE ATTACH; Schema: public; Owner: -
--

ALTER TABLE ONLY public.run_event_payloads ATTACH PARTITION public.run_event_payloads_p24 FOR VALUES WITH (modulus 32, remainder 24);

--
-- Name: run_event_payloads_p25; Type: TABLE ATTACH; Schema: public; Owner: -
--

ALTER TABLE ONLY public.run_event_payloads ATTACH PARTITION public.run_event_payloads_p25 FOR VALUES WITH (modulus 32, remainder 25);

--
-- Name: run_event_payloads_p26; Type: TABLE ATTACH; Schema: public; Owner: -
--

ALTER TABLE ONLY public.run_event_payloads ATTACH PARTITION public.run_event_payloads_p26 FOR VALUES WITH (modulus 32, remainder 26);

--
-- Name: run_event_payloads_p27; Type: TABLE ATTACH; Schema: public; Owner: -
--

ALTER TABLE ONLY public.run_event_payloads ATTACH PARTITION public.run_event_payloads_p27 FOR VALUES WITH (modulus 32, remainder 27);

--
-- Name: run_event_payloads_p28; Type: TABLE ATTACH; Schema: public; Owner: -
--

ALTER TABLE ONLY public.run_event_payloads ATTACH PARTITION public.run_event_payloads_p28 FOR VALUES WITH (modulus 32, remainder 28);

--
-- Name: run_event_payloads_p29; Type: TABLE ATTACH; Schema: public; Owner: -
--

ALTER TABLE ONLY public.run_event_payloads ATTACH PARTITION public.run_event_payloads_p29 FOR VALUES WITH (modulus 32, remainder 29);

--
-- Name: run_event_payloads_p30; Type: TABLE ATTACH; Schema: public; Owner: -
--

ALTER TABLE ONLY public.run_event_payloads ATTACH PARTITION public.run_event_payloads_p30 FOR VALUES WITH (modulus 32, remainder 30);

--
-- Name: run_event_payloads_p31; Type: TABLE ATTACH; Schema: public; Owner: -
--

ALTER TABLE ONLY public.run_event_payloads ATTACH PARTITION public.run_event_payloads_p31 FOR VALUES WITH (modulus 32, remainder 31);

--
-- Name: run_events_p00; Type: TABLE ATTACH; Schema: public; Owner: -
--

ALTER TABLE ONLY public.run_events ATTACH PARTITION public.run_events_p00 FOR VALUES WITH (modulus 32, remainder 0);

--
-- Name: run_events_p01; Type: TABLE ATTACH; Schema: public; Owner: -
--

ALTER TABLE ONLY public.run_events ATTACH PARTITION public.run_events_p01 FOR VALUES WITH (modulus 32, remainder 1);

--
-- Name: run_events_p02; Type: TABLE ATTACH; Schema: public; Owner: -
--

ALTER TABLE ONLY public.run_events ATTACH PARTITION public.run_events_p02 FOR VALUES WITH (modulus 32, remainder 2);

--
-- Name: run_events_p03; Type: TABLE ATTACH; Schema: public; Owner: -
--

ALTER TABLE ONLY public.run_events ATTACH PARTITION public.run_events_p03 FOR VALUES WITH (modulus 32, remainder 3);

--
-- Name: run_events_p04; Type: TABLE ATTACH; Schema: public; Owner: -
--

ALTER TABLE ONLY public.run_events ATTACH PARTITION public.run_events_p04 FOR VALUES WITH (modulus 32, remainder 4);

--
-- Name: run_events_p05; Type: TABLE ATTACH; Schema: public; Owner: -
--

ALTER TABLE ONLY public.run_events ATTACH PARTITION public.run_events_p05 FOR VALUES WITH (modulus 32, remainder 5);

--
-- Name: run_events_p06; Type: TABLE ATTACH; Schema: public; Owner: -
--

ALTER TABLE ONLY public.run_events ATTACH PARTITION public.run_events_p06 FOR VALUES WITH (modulus 32, remainder 6);

--
-- Name: run_events_p07; Type: TABLE ATTACH; Schema: public; Owner: -
--

ALTER TABLE ONLY public.run_events ATTACH PARTITION public.run_events_p07 FOR VALUES WITH (modulus 32, remainder 7);

--
-- Name: run_events_p08; Type: TABLE ATTACH; Schema: public; Owner: -
--

ALTER TABLE ONLY public.run_events ATTACH PARTITION public.run_events_p08 FOR VALUES WITH (modulus 32, remainder 8);

--
-- Name: run_events_p09; Type: TABLE ATTACH; Schema: public; Owner: -
--

ALTER TABLE ONLY public.run_events ATTACH PARTITION public.run_events_p09 FOR VALUES WITH (modulus 32, remainder 9);

--
-- Name: run_events_p10; Type: TABLE ATTACH; Schema: public; Owner: -
--

ALTER TABLE ONLY public.run_events ATTACH PARTITION public.run_events_p10 FOR VALUES WITH (modulus 32, remainder 10);

--
-- Name: run_events_p11; Type: TABLE ATTACH; Schema: public; Owner: -
--

ALTER TABLE ONLY public.run_events ATTACH PARTITION public.run_events_p11 FOR VALUES WITH (modulus 32, remainder 11);

--
-- Name: run_events_p12; Type: TABLE ATTACH; Schema: public; Owner: -
--

ALTER TABLE ONLY public.run_events ATTACH PARTITION public.run_events_p12 FOR VALUES WITH (modulus 32, remainder 12);

--
-- Name: run_events_p13; Type: TABLE ATTACH; Schema: public; Owner: -
--

ALTER TABLE ONLY public.run_events ATTACH PARTITION public.run_events_p13 FOR VALUES WITH (modulus 32, remainder 13);

--
-- Name: run_events_p14; Type: TABLE ATTACH; Schema: public; Owner: -
--

ALTER TABLE ONLY public.run_events ATTACH PARTITION public.run_events_p14 FOR VALUES WITH (modulus 32, remainder 14);

--
-- Name: run_events_p15; Type: TABLE ATTACH; Schema: public; Owner: -
--

ALTER TABLE ONLY public.run_events ATTACH PARTITION public.run_events_p15 FOR VALUES WITH (modulus 32, remainder 15);

--
-- Name: run_events_p16; Type: TABLE ATTACH; Schema: public; Owner: -
--

ALTER TABLE ONLY public.run_events ATTACH PARTITION public.run_events_p16 FOR VALUES WITH (modulus 32, remainder 16);

--
-- Name: run_events_p17; Type: TABLE ATTACH; Schema: public; Owner: -
--

ALTER TABLE ONLY public.run_events ATTACH PARTITION public.run_events_p17 FOR VALUES WITH (modulus 32, remainder 17);

--
-- Name: run_events_p18; Type: TABLE ATTACH; Schema: public; Owner: -
--

ALTER TABLE ONLY public.run_events ATTACH PARTITION public.run_events_p18 FOR VALUES WITH (modulus 32, remainder 18);

--
-- Name: run_events_p19; Type: TABLE ATTACH; Schema: public; Owner: -
--

ALTER TABLE ONLY public.run_events ATTACH PARTITION public.run_events_p19 FOR VALUES WITH (modulus 32, remainder 19);

--
-- Name: run_events_p20; Type: TABLE ATTACH; Schema: public; Owner: -
--

ALTER TABLE ONLY public.run_events ATTACH PARTITION public.run_events_p20 FOR VALUES WITH (modulus 32, remainder 20);

--
-- Name: run_events_p21; Type: TABLE ATTACH; Schema: public; Owner: -
--

ALTER TABLE ONLY public.run_events ATTACH PARTITION public.run_events_p21 FOR VALUES WITH (modulus 32, remainder 21);

--
-- Name: run_events_p22; Type: TABLE ATTACH; Schema: public; Owner: -
--

ALTER TABLE ONLY public.run_events ATTACH PARTITION public.run_events_p22 FOR VALUES WITH (modulus 32, remainder 22);

--
-- Name: run_events_p23; Type: TABLE ATTACH; Schema: public; Owner: -
--

ALTER TABLE ONLY public.run_events ATTACH PARTITION public.run_events_p23 FOR VALUES WITH (modulus 32, remainder 23);

--
-- Name: run_events_p24; Type: TABLE ATTACH; Schema: public; Owner: -
--

ALTER TABLE ONLY public.run_events ATTACH PARTITION public.run_events_p24 FOR VALUES WITH (modulus 32, remainder 24);

--
-- Name: run_events_p25; Type: TABLE ATTACH; Schema: public; Owner: -
--

ALTER TABLE ONLY public.run_events ATTACH PARTITION public.run_events_p25 FOR VALUES WITH (modulus 32, remainder 25);

--
-- Name: run_events_p26; Type: TABLE ATTACH; Schema: public; Owner: -
--

ALTER TABLE ONLY public.run_events ATTACH PARTITION public.run_events_p26 FOR VALUES WITH (modulus 32, remainder 26);

--
-- Name: run_events_p27; Type: TABLE ATTACH; Schema: public; Owner: -
--

ALTER TABLE ONLY public.run_events ATTACH PARTITION public.run_events_p27 FOR VALUES WITH (modulus 32, remainder 27);

--
-- Name: run_events_p28; Type: TABLE ATTACH; Schema: public; Owner: -
--

ALTER TABLE ONLY public.run_events ATTACH PARTITION public.run_events_p28 FOR VALUES WITH (modulus 32, remainder 28);

--
-- Name: run_events_p29; Type: TABLE ATTACH; Schema: public; Owner: -
--

ALTER TABLE ONLY public.run_events ATTACH PARTITION public.run_events_p29 FOR VALUES WITH (modulus 32, remainder 29);

--
-- Name: run_events_p30; Type: TABLE ATTACH; Schema: public; Owner: -
--

ALTER TABLE ONLY public.run_events ATTACH PARTITION public.run_events_p30 FOR VALUES WITH (modulus 32, remainder 30);

--
-- Name: run_events_p31; Type: TABLE ATTACH; Schema: public; Owner: -
--

ALTER TABLE ONLY public.run_events ATTACH PARTITION public.run_events_p31 FOR VALUES WITH (modulus 32, remainder 31);

--
-- Name: account_changes account_changes_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.account_changes
    ADD CONSTRAINT account_changes_pkey PRIMARY KEY (tenant_id, change_id);

--
-- Name: activity_bundles activity_bundles_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.activity_bundles
    ADD CONSTRAINT activity_bundles_pkey PRIMARY KEY (tenant_id, digest);

--
-- Name: activity_versions activity_versions_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.activity_versions
    ADD CONSTRAINT activity_versions_pkey PRIMARY KEY (tenant_id, agent_id, version);

--
-- Name: activity_versions activity_versions_tenant_id_name_version_key; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.activity_versions
    ADD CONSTRAINT activity_versions_tenant_id_name_version_key UNIQUE (tenant_id, name, version);

--
-- Name: agent_evaluations agent_evaluations_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.agent_evaluations
    ADD CONSTRAINT agent_evaluations_pkey PRIMARY KEY (tenant_id, evaluation_id);

--
-- Name: agent_model_snapshot_promotions agent_model_snapshot_promotions_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.agent_model_snapshot_promotions
    ADD CONSTRAINT agent_model_snapshot_promotions_pkey PRIMARY KEY (tenant_id, agent_id, model, promotion_id);

--
-- Name: agent_model_snapshots agent_model_snapshots_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.agent_model_snapshots
    ADD CONSTRAINT agent_model_snapshots_pkey PRIMARY KEY (tenant_id, agent_id, model);

--
-- Name: agent_promotions agent_promotions_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.agent_promotions
    ADD CONSTRAINT agent_promotions_pkey PRIMARY KEY (tenant_id, promotion_id);

--
-- Name: agent_test_sets agent_test_sets_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.agent_test_sets
    ADD CONSTRAINT agent_test_sets_pkey PRIMARY KEY (tenant_id, test_set_id);

--
-- Name: agent_test_sets agent_test_sets_tenant_id_agent_id_name_key; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.agent_test_sets
    ADD CONSTRAINT agent_test_sets_tenant_id_agent_id_name_key UNIQUE (tenant_id, agent_id, name);

--
-- Name: agent_version_flags agent_version_flags_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.agent_version_flags
    ADD CONSTRAINT agent_version_flags_pkey PRIMARY KEY (tenant_id, agent_id, version);

--
-- Name: agent_versions agent_versions_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.agent_versions
    ADD CONSTRAINT agent_versions_pkey PRIMARY KEY (tenant_id, agent_id, version);

--
-- Name: agents agents_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.agents
    ADD CONSTRAINT agents_pkey PRIMARY KEY (tenant_id, agent_id);

--
-- Name: agents agents_tenant_id_name_key; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.agents
    ADD CONSTRAINT agents_tenant_id_name_key UNIQUE (tenant_id, name);

--
-- Name: api_keys api_keys_key_hash_key; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.api_keys
    ADD CONSTRAINT api_keys_key_hash_key UNIQUE (key_hash);

--
-- Name: api_keys api_keys_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.api_keys
    ADD CONSTRAINT api_keys_pkey PRIMARY KEY (tenant_id, key_id);

--
-- Name: app_sessions app_sessions_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.app_sessions
    ADD CONSTRAINT app_sessions_pkey PRIMARY KEY (tenant_id, session_hash);

--
-- Name: app_sessions app_sessions_session_hash_key; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.app_sessions
    ADD CONSTRAINT app_sessions_session_hash_key UNIQUE (session_hash);

--
-- Name: approvals approvals_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.approvals
    ADD CONSTRAINT approvals_pkey PRIMARY KEY (tenant_id, approval_id);

--
-- Name: approvals approvals_tenant_id_key_key; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.approvals
    ADD CONSTRAINT approvals_tenant_id_key_key UNIQUE (tenant_id, key);

--
-- Name: audit_log audit_log_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.audit_log
    ADD CONSTRAINT audit_log_pkey PRIMARY KEY (tenant_id, audit_id);

--
-- Name: billing_reconcile_days billing_reconcile_days_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.billing_reconcile_days
    ADD CONSTRAINT billing_reconcile_days_pkey PRIMARY KEY (account, day);

--
-- Name: billing_reconcile_lease billing_reconcile_lease_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.billing_reconcile_lease
    ADD CONSTRAINT billing_reconcile_lease_pkey PRIMARY KEY (job);

--
-- Name: billing_reconciliations billing_reconciliations_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.billing_reconciliations
    ADD CONSTRAINT billing_reconciliations_pkey PRIMARY KEY (reconciliation_id);

--
-- Name: blob_deletions blob_deletions_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.blob_deletions
    ADD CONSTRAINT blob_deletions_pkey PRIMARY KEY (tenant_id, ref);

--
-- Name: blob_usage blob_usage_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.blob_usage
    ADD CONSTRAINT blob_usage_pkey PRIMARY KEY (tenant_id);

--
-- Name: blobs blobs_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.blobs
    ADD CONSTRAINT blobs_pkey PRIMARY KEY (tenant_id, ref);

--
-- Name: budget_reservations budget_reservations_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.budget_reservations
    ADD CONSTRAINT budget_reservations_pkey PRIMARY KEY (tenant_id, reservation_id);

--
-- Name: cleanup_leases cleanup_leases_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.cleanup_leases
    ADD CONSTRAINT cleanup_leases_pkey PRIMARY KEY (tenant_id);

--
-- Name: console_actions console_actions_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.console_actions
    ADD CONSTRAINT console_actions_pkey PRIMARY KEY (action_id);

--
-- Name: console_session_epoch console_session_epoch_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.console_session_epoch
    ADD CONSTRAINT console_session_epoch_pkey PRIMARY KEY (singleton);

--
-- Name: endpoint_deliveries endpoint_deliveries_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.endpoint_deliveries
    ADD CONSTRAINT endpoint_deliveries_pkey PRIMARY KEY (tenant_id, run_id, endpoint_id);

--
-- Name: erase_jobs erase_jobs_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.erase_jobs
    ADD CONSTRAINT erase_jobs_pkey PRIMARY KEY (job_id);

--
-- Name: evaluation_results evaluation_results_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.evaluation_results
    ADD CONSTRAINT evaluation_results_pkey PRIMARY KEY (tenant_id, run_id);

--
-- Name: evaluation_runs evaluation_runs_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.evaluation_runs
    ADD CONSTRAINT evaluation_runs_pkey PRIMARY KEY (tenant_id, evaluation_id, case_index, side);

--
-- Name: exports exports_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.exports
    ADD CONSTRAINT exports_pkey PRIMARY KEY (tenant_id, export_id);

--
-- Name: exports exports_tenant_id_idempotency_key_key; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.exports
    ADD CONSTRAINT exports_tenant_id_idempotency_key_key UNIQUE (tenant_id, idempotency_key);

--
-- Name: frozen_tenants frozen_tenants_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.frozen_tenants
    ADD CONSTRAINT frozen_tenants_pkey PRIMARY KEY (tenant_id);

--
-- Name: model_accounts model_accounts_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.model_accounts
    ADD CONSTRAINT model_accounts_pkey PRIMARY KEY (account_id);

--
-- Name: model_capacity_shares model_capacity_shares_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.model_capacity_shares
    ADD CONSTRAINT model_capacity_shares_pkey PRIMARY KEY (account_id, holder);

--
-- Name: model_prices model_prices_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.model_prices
    ADD CONSTRAINT model_prices_pkey PRIMARY KEY (model, effective_from);

--
-- Name: operator_notifications operator_notifications_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.operator_notifications
    ADD CONSTRAINT operator_notifications_pkey PRIMARY KEY (account, day, kind);

--
-- Name: operator_sign_in_links operator_sign_in_links_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.operator_sign_in_links
    ADD CONSTRAINT operator_sign_in_links_pkey PRIMARY KEY (link_hash);

--
-- Name: operator_tokens operator_tokens_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.operator_tokens
    ADD CONSTRAINT operator_tokens_pkey PRIMARY KEY (token_hash);

--
-- Name: operator_users operator_users_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.operator_users
    ADD CONSTRAINT operator_users_pkey PRIMARY KEY (user_id);

--
-- Name: retention_policies retention_policies_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.retention_policies
    ADD CONSTRAINT retention_policies_pkey PRIMARY KEY (tenant_id);

--
-- Name: run_event_payloads run_event_payloads_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.run_event_payloads
    ADD CONSTRAINT run_event_payloads_pkey PRIMARY KEY (tenant_id, run_id, seq);

--
-- Name: run_event_payloads_p00 run_event_payloads_p00_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.run_event_payloads_p00
    ADD CONSTRAINT run_event_payloads_p00_pkey PRIMARY KEY (tenant_id, run_id, seq);

--
-- Name: run_event_payloads_p01 run_event_payloads_p01_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.run_event_payloads_p01
    ADD CONSTRAINT run_event_payloads_p01_pkey PRIMARY KEY (tenant_id, run_id, seq);

--
-- Name: run_event_payloads_p02 run_event_payloads_p02_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.run_event_payloads_p02
    ADD CONSTRAINT run_event_payloads_p02_pkey PRIMARY KEY (tenant_id, run_id, seq);

--
-- Name: run_event_payloads_p03 run_event_payloads_p03_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.run_event_payloads_p03
    ADD CONSTRAINT run_event_payloads_p03_pkey PRIMARY KEY (tenant_id, run_id, seq);

--
-- Name: run_event_payloads_p04 run_event_payloads_p04_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.run_event_payloads_p04
    ADD CONSTRAINT run_event_payloads_p04_pkey PRIMARY KEY (tenant_id, run_id, seq);

--
-- Name: run_event_payloads_p05 run_event_payloads_p05_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.run_event_payloads_p05
    ADD CONSTRAINT run_event_payloads_p05_pkey PRIMARY KEY (tenant_id, run_id, seq);

--
-- Name: run_event_payloads_p06 run_event_payloads_p06_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.run_event_payloads_p06
    ADD CONSTRAINT run_event_payloads_p06_pkey PRIMARY KEY (tenant_id, run_id, seq);

--
-- Name: run_event_payloads_p07 run_event_payloads_p07_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.run_event_payloads_p07
    ADD CONSTRAINT run_event_payloads_p07_pkey PRIMARY KEY (tenant_id, run_id, seq);

--
-- Name: run_event_payloads_p08 run_event_payloads_p08_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.run_event_payloads_p08
    ADD CONSTRAINT run_event_payloads_p08_pkey PRIMARY KEY (tenant_id, run_id, seq);

--
-- Name: run_event_payloads_p09 run_event_payloads_p09_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.run_event_payloads_p09
    ADD CONSTRAINT run_event_payloads_p09_pkey PRIMARY KEY (tenant_id, run_id, seq);

--
-- Name: run_event_payloads_p10 run_event_payloads_p10_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.run_event_payloads_p10
    ADD CONSTRAINT run_event_payloads_p10_pkey PRIMARY KEY (tenant_id, run_id, seq);

--
-- Name: run_event_payloads_p11 run_event_payloads_p11_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.run_event_payloads_p11
    ADD CONSTRAINT run_event_payloads_p11_pkey PRIMARY KEY (tenant_id, run_id, seq);

--
-- Name: run_event_payloads_p12 run_event_payloads_p12_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.run_event_payloads_p12
    ADD CONSTRAINT run_event_payloads_p12_pkey PRIMARY KEY (tenant_id, run_id, seq);

--
-- Name: run_event_payloads_p13 run_event_payloads_p13_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.run_event_payloads_p13
    ADD CONSTRAINT run_event_payloads_p13_pkey PRIMARY KEY (tenant_id, run_id, seq);

--
-- Name: run_event_payloads_p14 run_event_payloads_p14_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.run_event_payloads_p14
    ADD CONSTRAINT run_event_payloads_p14_pkey PRIMARY KEY (tenant_id, run_id, seq);

--
-- Name: run_event_payloads_p15 run_event_payloads_p15_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.run_event_payloads_p15
    ADD CONSTRAINT run_event_payloads_p15_pkey PRIMARY KEY (tenant_id, run_id, seq);

--
-- Name: run_event_payloads_p16 run_event_payloads_p16_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.run_event_payloads_p16
    ADD CONSTRAINT run_event_payloads_p16_pkey PRIMARY KEY (tenant_id, run_id, seq);

--
-- Name: run_event_payloads_p17 run_event_payloads_p17_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.run_event_payloads_p17
    ADD CONSTRAINT run_event_payloads_p17_pkey PRIMARY KEY (tenant_id, run_id, seq);

--
-- Name: run_event_payloads_p18 run_event_payloads_p18_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.run_event_payloads_p18
    ADD CONSTRAINT run_event_payloads_p18_pkey PRIMARY KEY (tenant_id, run_id, seq);

--
-- Name: run_event_payloads_p19 run_event_payloads_p19_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.run_event_payloads_p19
    ADD CONSTRAINT run_event_payloads_p19_pkey PRIMARY KEY (tenant_id, run_id, seq);

--
-- Name: run_event_payloads_p20 run_event_payloads_p20_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.run_event_payloads_p20
    ADD CONSTRAINT run_event_payloads_p20_pkey PRIMARY KEY (tenant_id, run_id, seq);

--
-- Name: run_event_payloads_p21 run_event_payloads_p21_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.run_event_payloads_p21
    ADD CONSTRAINT run_event_payloads_p21_pkey PRIMARY KEY (tenant_id, run_id, seq);

--
-- Name: run_event_payloads_p22 run_event_payloads_p22_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.run_event_payloads_p22
    ADD CONSTRAINT run_event_payloads_p22_pkey PRIMARY KEY (tenant_id, run_id, seq);

--
-- Name: run_event_payloads_p23 run_event_payloads_p23_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.run_event_payloads_p23
    ADD CONSTRAINT run_event_payloads_p23_pkey PRIMARY KEY (tenant_id, run_id, seq);

--
-- Name: run_event_payloads_p24 run_event_payloads_p24_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.run_event_payloads_p24
    ADD CONSTRAINT run_event_payloads_p24_pkey PRIMARY KEY (tenant_id, run_id, seq);

--
-- Name: run_event_payloads_p25 run_event_payloads_p25_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.run_event_payloads_p25
    ADD CONSTRAINT run_event_payloads_p25_pkey PRIMARY KEY (tenant_id, run_id, seq);

--
-- Name: run_event_payloads_p26 run_event_payloads_p26_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.run_event_payloads_p26
    ADD CONSTRAINT run_event_payloads_p26_pkey PRIMARY KEY (tenant_id, run_id, seq);

--
-- Name: run_event_payloads_p27 run_event_payloads_p27_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.run_event_payloads_p27
    ADD CONSTRAINT run_event_payloads_p27_pkey PRIMARY KEY (tenant_id, run_id, seq);

--
-- Name: run_event_payloads_p28 run_event_payloads_p28_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.run_event_payloads_p28
    ADD CONSTRAINT run_event_payloads_p28_pkey PRIMARY KEY (tenant_id, run_id, seq);

--
-- Name: run_event_payloads_p29 run_event_payloads_p29_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.run_event_payloads_p29
    ADD CONSTRAINT run_event_payloads_p29_pkey PRIMARY KEY (tenant_id, run_id, seq);

--
-- Name: run_event_payloads_p30 run_event_payloads_p30_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.run_event_payloads_p30
    ADD CONSTRAINT run_event_payloads_p30_pkey PRIMARY KEY (tenant_id, run_id, seq);

--
-- Name: run_event_payloads_p31 run_event_payloads_p31_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.run_event_payloads_p31
    ADD CONSTRAINT run_event_payloads_p31_pkey PRIMARY KEY (tenant_id, run_id, seq);

--
-- Name: run_events run_events_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.run_events
    ADD CONSTRAINT run_events_pkey PRIMARY KEY (tenant_id, run_id, seq);

--
-- Name: run_events_p00 run_events_p00_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.run_events_p00
    ADD CONSTRAINT run_events_p00_pkey PRIMARY KEY (tenant_id, run_id, seq);

--
-- Name: run_events_p01 run_events_p01_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.run_events_p01
    ADD CONSTRAINT run_events_p01_pkey PRIMARY KEY (tenant_id, run_id, seq);

--
-- Name: run_events_p02 run_events_p02_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.run_events_p02
    ADD CONSTRAINT run_events_p02_pkey PRIMARY KEY (tenant_id, run_id, seq);

--
-- Name: run_events_p03 run_events_p03_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.run_events_p03
    ADD CONSTRAINT run_events_p03_pkey PRIMARY KEY (tenant_id, run_id, seq);

--
-- Name: run_events_p04 run_events_p04_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.run_events_p04
    ADD CONSTRAINT run_events_p04_pkey PRIMARY KEY (tenant_id, run_id, seq);

--
-- Name: run_events_p05 run_events_p05_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.run_events_p05
    ADD CONSTRAINT run_events_p05_pkey PRIMARY KEY (tenant_id, run_id, seq);

--
-- Name: run_events_p06 run_events_p06_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.run_events_p06
    ADD CONSTRAINT run_events_p06_pkey PRIMARY KEY (tenant_id, run_id, seq);

--
-- Name: run_events_p07 run_events_p07_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.run_events_p07
    ADD CONSTRAINT run_events_p07_pkey PRIMARY KEY (tenant_id, run_id, seq);

--
-- Name: run_events_p08 run_events_p08_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.run_events_p08
    ADD CONSTRAINT run_events_p08_pkey PRIMARY KEY (tenant_id, run_id, seq);

--
-- Name: run_events_p09 run_events_p09_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.run_events_p09
    ADD CONSTRAINT run_events_p09_pkey PRIMARY KEY (tenant_id, run_id, seq);

--
-- Name: run_events_p10 run_events_p10_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.run_events_p10
    ADD CONSTRAINT run_events_p10_pkey PRIMARY KEY (tenant_id, run_id, seq);

--
-- Name: run_events_p11 run_events_p11_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.run_events_p11
    ADD CONSTRAINT run_events_p11_pkey PRIMARY KEY (tenant_id, run_id, seq);

--
-- Name: run_events_p12 run_events_p12_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.run_events_p12
    ADD CONSTRAINT run_events_p12_pkey PRIMARY KEY (tenant_id, run_id, seq);

--
-- Name: run_events_p13 run_events_p13_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.run_events_p13
    ADD CONSTRAINT run_events_p13_pkey PRIMARY KEY (tenant_id, run_id, seq);

--
-- Name: run_events_p14 run_events_p14_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.run_events_p14
    ADD CONSTRAINT run_events_p14_pkey PRIMARY KEY (tenant_id, run_id, seq);

--
-- Name: run_events_p15 run_events_p15_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.run_events_p15
    ADD CONSTRAINT run_events_p15_pkey PRIMARY KEY (tenant_id, run_id, seq);

--
-- Name: run_events_p16 run_events_p16_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.run_events_p16
    ADD CONSTRAINT run_events_p16_pkey PRIMARY KEY (tenant_id, run_id, seq);

--
-- Name: run_events_p17 run_events_p17_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.run_events_p17
    ADD CONSTRAINT run_events_p17_pkey PRIMARY KEY (tenant_id, run_id, seq);

--
-- Name: run_events_p18 run_events_p18_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.run_events_p18
    ADD CONSTRAINT run_events_p18_pkey PRIMARY KEY (tenant_id, run_id, seq);

--
-- Name: run_events_p19 run_events_p19_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.run_events_p19
    ADD CONSTRAINT run_events_p19_pkey PRIMARY KEY (tenant_id, run_id, seq);

--
-- Name: run_events_p20 run_events_p20_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.run_events_p20
    ADD CONSTRAINT run_events_p20_pkey PRIMARY KEY (tenant_id, run_id, seq);

--
-- Name: run_events_p21 run_events_p21_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.run_events_p21
    ADD CONSTRAINT run_events_p21_pkey PRIMARY KEY (tenant_id, run_id, seq);

--
-- Name: run_events_p22 run_events_p22_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.run_events_p22
    ADD CONSTRAINT run_events_p22_pkey PRIMARY KEY (tenant_id, run_id, seq);

--
-- Name: run_events_p23 run_events_p23_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.run_events_p23
    ADD CONSTRAINT run_events_p23_pkey PRIMARY KEY (tenant_id, run_id, seq);

--
-- Name: run_events_p24 run_events_p24_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.run_events_p24
    ADD CONSTRAINT run_events_p24_pkey PRIMARY KEY (tenant_id, run_id, seq);

--
-- Name: run_events_p25 run_events_p25_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.run_events_p25
    ADD CONSTRAINT run_events_p25_pkey PRIMARY KEY (tenant_id, run_id, seq);

--
-- Name: run_events_p26 run_events_p26_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.run_events_p26
    ADD CONSTRAINT run_events_p26_pkey PRIMARY KEY (tenant_id, run_id, seq);

--
-- Name: run_events_p27 run_events_p27_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.run_events_p27
    ADD CONSTRAINT run_events_p27_pkey PRIMARY KEY (tenant_id, run_id, seq);

--
-- Name: run_events_p28 run_events_p28_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.run_events_p28
    ADD CONSTRAINT run_events_p28_pkey PRIMARY KEY (tenant_id, run_id, seq);

--
-- Name: run_events_p29 run_events_p29_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.run_events_p29
    ADD CONSTRAINT run_events_p29_pkey PRIMARY KEY (tenant_id, run_id, seq);

--
-- Name: run_events_p30 run_events_p30_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.run_events_p30
    ADD CONSTRAINT run_events_p30_pkey PRIMARY KEY (tenant_id, run_id, seq);

--
-- Name: run_events_p31 run_events_p31_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.run_events_p31
    ADD CONSTRAINT run_events_p31_pkey PRIMARY KEY (tenant_id, run_id, seq);

--
-- Name: run_status_totals run_status_totals_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.run_status_totals
    ADD CONSTRAINT run_status_totals_pkey PRIMARY KEY (tenant_id, status);

--
-- Name: runs runs_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.runs
    ADD CONSTRAINT runs_pkey PRIMARY KEY (tenant_id, run_id);

--
-- Name: runs runs_tenant_id_idempotency_key_key; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.runs
    ADD CONSTRAINT runs_tenant_id_idempotency_key_key UNIQUE (tenant_id, idempotency_key);

--
-- Name: runs runs_waiting_cap_micros_check; Type: CHECK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE public.runs
    ADD CONSTRAINT runs_waiting_cap_micros_check CHECK ((waiting_cap_micros >= 0)) NOT VALID;

--
-- Name: sandbox_usage_facts sandbox_usage_facts_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.sandbox_usage_facts
    ADD CONSTRAINT sandbox_usage_facts_pkey PRIMARY KEY (tenant_id, run_id, seq);

--
-- Name: schema_contract_steps schema_contract_steps_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.schema_contract_steps
    ADD CONSTRAINT schema_contract_steps_pkey PRIMARY KEY (version);

--
-- Name: schema_migrations schema_migrations_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.schema_migrations
    ADD CONSTRAINT schema_migrations_pkey PRIMARY KEY (version);

--
-- Name: schema_releases schema_releases_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.schema_releases
    ADD CONSTRAINT schema_releases_pkey PRIMARY KEY (release);

--
-- Name: schema_routines schema_routines_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.schema_routines
    ADD CONSTRAINT schema_routines_pkey PRIMARY KEY (name);

--
-- Name: secrets secrets_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.secrets
    ADD CONSTRAINT secrets_pkey PRIMARY KEY (tenant_id, name);

--
-- Name: sign_in_links sign_in_links_link_hash_key; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.sign_in_links
    ADD CONSTRAINT sign_in_links_link_hash_key UNIQUE (link_hash);

--
-- Name: sign_in_links sign_in_links_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.sign_in_links
    ADD CONSTRAINT sign_in_links_pkey PRIMARY KEY (tenant_id, link_hash);

--
-- Name: tenant_budget tenant_budget_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.tenant_budget
    ADD CONSTRAINT tenant_budget_pkey PRIMARY KEY (tenant_id);

--
-- Name: tenant_keys tenant_keys_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.tenant_keys
    ADD CONSTRAINT tenant_keys_pkey PRIMARY KEY (tenant_id);

--
-- Name: tenant_load tenant_load_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.tenant_load
    ADD CONSTRAINT tenant_load_pkey PRIMARY KEY (tenant_id);

--
-- Name: tenant_policies tenant_policies_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.tenant_policies
    ADD CONSTRAINT tenant_policies_pkey PRIMARY KEY (tenant_id);

--
-- Name: tenant_users tenant_users_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.tenant_users
    ADD CONSTRAINT tenant_users_pkey PRIMARY KEY (tenant_id, user_id);

--
-- Name: tenants tenants_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.tenants
    ADD CONSTRAINT tenants_pkey PRIMARY KEY (tenant_id);

--
-- Name: test_case_sources test_case_sources_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.test_case_sources
    ADD CONSTRAINT test_case_sources_pkey PRIMARY KEY (tenant_id, test_set_id, case_index);

--
-- Name: tombstones tombstones_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.tombstones
    ADD CONSTRAINT tombstones_pkey PRIMARY KEY (tenant_id, run_id);

--
-- Name: tool_server_oauth tool_server_oauth_flow_state_key; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.tool_server_oauth
    ADD CONSTRAINT tool_server_oauth_flow_state_key UNIQUE (flow_state);

--
-- Name: tool_server_oauth tool_server_oauth_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.tool_server_oauth
    ADD CONSTRAINT tool_server_oauth_pkey PRIMARY KEY (tenant_id, server_id);

--
-- Name: tool_servers tool_servers_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.tool_servers
    ADD CONSTRAINT tool_servers_pkey PRIMARY KEY (tenant_id, server_id);

--
-- Name: tool_servers tool_servers_tenant_id_name_key; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.tool_servers
    ADD CONSTRAINT tool_servers_tenant_id_name_key UNIQUE (tenant_id, name);

--
-- Name: usage_facts usage_facts_account_owner_check; Type: CHECK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE public.usage_facts
    ADD CONSTRAINT usage_facts_account_owner_check CHECK ((account_owner = ANY (ARRAY['platform'::text, 'tenant'::text]))) NOT VALID;

--
-- Name: usage_facts usage_facts_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.usage_facts
    ADD CONSTRAINT usage_facts_pkey PRIMARY KEY (tenant_id, run_id, seq);

--
-- Name: webhook_attempts webhook_attempts_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.webhook_attempts
    ADD CONSTRAINT webhook_attempts_pkey PRIMARY KEY (tenant_id, delivery_id);

--
-- Name: webhook_endpoints webhook_endpoints_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.webhook_endpoints
    ADD CONSTRAINT webhook_endpoints_pkey PRIMARY KEY (tenant_id, endpoint_id);

--
-- Name: webhook_endpoints webhook_endpoints_tenant_id_slot_key; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.webhook_endpoints
    ADD CONSTRAINT webhook_endpoints_tenant_id_slot_key UNIQUE (tenant_id, slot);

--
-- Name: worker_sessions worker_sessions_lock_key_key; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.worker_sessions
    ADD CONSTRAINT worker_sessions_lock_key_key UNIQUE (lock_key);

--
-- Name: worker_sessions worker_sessions_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.worker_sessions
    ADD CONSTRAINT worker_sessions_pkey PRIMARY KEY (worker_id);

--
-- Name: account_changes_by_time; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX account_changes_by_time ON public.account_changes USING btree (tenant_id, created_at);

--
-- Name: agent_evaluations_by_agent; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX agent_evaluations_by_agent ON public.agent_evaluations USING btree (tenant_id, agent_id, created_at);

--
-- Name: agent_promotions_by_agent; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX agent_promotions_by_agent ON public.agent_promotions USING btree (tenant_id, agent_id, promoted_at);

--
-- Name: agent_version_flags_flagged; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX agent_version_flags_flagged ON public.agent_version_flags USING btree (tenant_id, flagged_at) WHERE (flagged_at IS NOT NULL);

--
-- Name: app_sessions_of_user; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX app_sessions_of_user ON public.app_sessions USING btree (tenant_id, user_id);

--
-- Name: approvals_console_pending; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX approvals_console_pending ON public.approvals USING btree (approval_id) WHERE (status = 'pending'::text);

--
-- Name: approvals_expiring; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX approvals_expiring ON public.approvals USING btree (expires_at) WHERE (status = 'pending'::text);

--
-- Name: approvals_pending; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX approvals_pending ON public.approvals USING btree (tenant_id, requested_at) WHERE (status = 'pending'::text);

--
-- Name: audit_log_by_time; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX audit_log_by_time ON public.audit_log USING btree (tenant_id, created_at);

--
-- Name: billing_reconciliations_by_account; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX billing_reconciliations_by_account ON public.billing_reconciliations USING btree (account, created_at DESC);

--
-- Name: billing_reconciliations_scheduled; Type: INDEX; Schema: public; Owner: -
--

CREATE UNIQUE INDEX billing_reconciliations_scheduled ON public.billing_reconciliations USING btree (account, scheduled_day) WHERE (scheduled_day IS NOT NULL);

--
-- Name: blob_deletions_due; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX blob_deletions_due ON public.blob_deletions USING btree (next_at);

--
-- Name: blobs_by_run; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX blobs_by_run ON public.blobs USING btree (tenant_id, run_id);

--
-- Name: budget_reservations_open; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX budget_reservations_open ON public.budget_reservations USING btree (created_at) WHERE (status = 'reserved'::text);

--
-- Name: budget_reservations_unfolded; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX budget_reservations_unfolded ON public.budget_reservations USING btree (tenant_id) WHERE (unfolded OR ((status = 'reserved'::text) AND (NOT counted)));

--
-- Name: console_actions_tenant; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX console_actions_tenant ON public.console_actions USING btree (tenant_id, action_id);

--
-- Name: endpoint_deliveries_by_endpoint; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX endpoint_deliveries_by_endpoint ON public.endpoint_deliveries USING btree (tenant_id, endpoint_id);

--
-- Name: endpoint_deliveries_due; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX endpoint_deliveries_due ON public.endpoint_deliveries USING btree (next_at) WHERE (state = 'pending'::text);

--
-- Name: erase_jobs_by_tenant; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX erase_jobs_by_tenant ON public.erase_jobs USING btree (tenant_id, created_at);

--
-- Name: erase_jobs_one_running; Type: INDEX; Schema: public; Owner: -
--

CREATE UNIQUE INDEX erase_jobs_one_running ON public.erase_jobs USING btree (tenant_id) WHERE (status = 'running'::text);

--
-- Name: evaluation_runs_by_run; Type: INDEX; Schema: public; Owner: -
--

CREATE UNIQUE INDEX evaluation_runs_by_run ON public.evaluation_runs USING btree (tenant_id, run_id);

--
-- Name: exports_expiry; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX exports_expiry ON public.exports USING btree (tenant_id, expires_at) WHERE (status = ANY (ARRAY['ready'::text, 'failed'::text]));

--
-- Name: exports_unfinished; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX exports_unfinished ON public.exports USING btree (created_at) WHERE (status = ANY (ARRAY['queued'::text, 'running'::text]));

--
-- Name: model_accounts_tenant; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX model_accounts_tenant ON public.model_accounts USING btree (tenant_id) WHERE (tenant_id IS NOT NULL);

--
-- Name: operator_notifications_due; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX operator_notifications_due ON public.operator_notifications USING btree (next_attempt_at) WHERE (next_attempt_at IS NOT NULL);

--
-- Name: operator_sign_in_links_of_user; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX operator_sign_in_links_of_user ON public.operator_sign_in_links USING btree (user_id);

--
-- Name: operator_users_email; Type: INDEX; Schema: public; Owner: -
--

CREATE UNIQUE INDEX operator_users_email ON public.operator_users USING btree (lower(email));

--
-- Name: runs_activity_running; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX runs_activity_running ON public.runs USING btree (tenant_id) WHERE ((kind = 'activity'::text) AND (status = 'running'::text));

--
-- Name: runs_by_parent; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX runs_by_parent ON public.runs USING btree (tenant_id, parent_run_id) WHERE (parent_run_id IS NOT NULL);

--
-- Name: runs_console_by_status; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX runs_console_by_status ON public.runs USING btree (status, run_id);

--
-- Name: runs_console_recent; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX runs_console_recent ON public.runs USING btree (run_id);

--
-- Name: runs_leased; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX runs_leased ON public.runs USING btree (lease_expires_at) WHERE (status = 'running'::text);

--
-- Name: runs_parked_due; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX runs_parked_due ON public.runs USING btree (available_at) WHERE ((status = 'waiting'::text) AND (parked_on IS NOT NULL));

--
-- Name: runs_queued; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX runs_queued ON public.runs USING btree (created_at) WHERE (status = 'queued'::text);

--
-- Name: runs_queued_by_tenant; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX runs_queued_by_tenant ON public.runs USING btree (tenant_id, kind, ((steps = 0)), ((priority <> 'interactive'::text)), created_at) WHERE (status = 'queued'::text);

--
-- Name: runs_queued_in_flight; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX runs_queued_in_flight ON public.runs USING btree (tenant_id, kind, available_at) WHERE ((status = 'queued'::text) AND (steps > 0));

--
-- Name: runs_retention_candidates; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX runs_retention_candidates ON public.runs USING btree (tenant_id, COALESCE(finished_at, updated_at)) WHERE ((status = ANY (ARRAY['finished'::text, 'failed'::text, 'cancelled'::text])) OR ((status = 'waiting'::text) AND ((error ->> 'dead_lettered'::text) = 'true'::text)));

--
-- Name: runs_running_by_owner; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX runs_running_by_owner ON public.runs USING btree (lease_owner) WHERE (status = 'running'::text);

--
-- Name: runs_waiting_for_spend_cap; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX runs_waiting_for_spend_cap ON public.runs USING btree (available_at) WHERE ((status = 'waiting'::text) AND (waiting_cap_micros IS NOT NULL));

--
-- Name: runs_waiting_for_tool_server; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX runs_waiting_for_tool_server ON public.runs USING btree (tenant_id, waiting_tool_server) WHERE ((status = 'waiting'::text) AND (waiting_tool_server IS NOT NULL));

--
-- Name: runs_webhooks_due; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX runs_webhooks_due ON public.runs USING btree (webhook_next_at) WHERE (webhook_state = 'pending'::text);

--
-- Name: sandbox_usage_facts_by_time; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX sandbox_usage_facts_by_time ON public.sandbox_usage_facts USING btree (tenant_id, created_at);

--
-- Name: tenant_users_by_email; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX tenant_users_by_email ON public.tenant_users USING btree (lower(email));

--
-- Name: tenant_users_email; Type: INDEX; Schema: public; Owner: -
--

CREATE UNIQUE INDEX tenant_users_email ON public.tenant_users USING btree (tenant_id, lower(email));

--
-- Name: test_case_sources_by_run; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX test_case_sources_by_run ON public.test_case_sources USING btree (tenant_id, run_id);

--
-- Name: tombstones_by_age; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX tombstones_by_age ON public.tombstones USING btree (tenant_id, deleted_at);

--
-- Name: tombstones_by_idempotency_key; Type: INDEX; Schema: public; Owner: -
--

CREATE UNIQUE INDEX tombstones_by_idempotency_key ON public.tombstones USING btree (tenant_id, idempotency_key_sha256) WHERE (idempotency_key_sha256 IS NOT NULL);

--
-- Name: usage_facts_by_account; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX usage_facts_by_account ON public.usage_facts USING btree (account, created_at);

--
-- Name: usage_facts_by_time; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX usage_facts_by_time ON public.usage_facts USING btree (tenant_id, created_at);

--
-- Name: webhook_attempts_by_endpoint; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX webhook_attempts_by_endpoint ON public.webhook_attempts USING btree (tenant_id, endpoint_id, delivery_id);

--
-- Name: webhook_attempts_by_run; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX webhook_attempts_by_run ON public.webhook_attempts USING btree (tenant_id, run_id, delivery_id);

--
-- Name: run_event_payloads_p00_pkey; Type: INDEX ATTACH; Schema: public; Owner: -
--

ALTER INDEX public.run_event_payloads_pkey ATTACH PARTITION public.run_event_payloads_p00_pkey;

--
-- Name: run_event_payloads_p01_pkey; Type: INDEX ATTACH; Schema: public; Owner: -
--

ALTER INDEX public.run_event_payloads_pkey ATTACH PARTITION public.run_event_payloads_p01_pkey;

--
-- Name: run_event_payloads_p02_pkey; Type: INDEX ATTACH; Schema: public; Owner: -
--

ALTER INDEX public.run_event_payloads_pkey ATTACH PARTITION public.run_event_payloads_p02_pkey;

--
-- Name: run_event_payloads_p03_pkey; Type: INDEX ATTACH; Schema: public; Owner: -
--

ALTER INDEX public.run_event_payloads_pkey ATTACH PARTITION public.run_event_payloads_p03_pkey;

--
-- Name: run_event_payloads_p04_pkey; Type: INDEX ATTACH; Schema: public; Owner: -
--

ALTER INDEX public.run_event_payloads_pkey ATTACH PARTITION public.run_event_payloads_p04_pkey;

--
-- Name: run_event_payloads_p05_pkey; Type: INDEX ATTACH; Schema: public; Owner: -
--

ALTER INDEX public.run_event_payloads_pkey ATTACH PARTITION public.run_event_payloads_p05_pkey;

--
-- Name: run_event_payloads_p06_pkey; Type: INDEX ATTACH; Schema: public; Owner: -
--

ALTER INDEX public.run_event_payloads_pkey ATTACH PARTITION public.run_event_payloads_p06_pkey;

--
-- Name: run_event_payloads_p07_pkey; Type: INDEX ATTACH; Schema: public; Owner: -
--

ALTER INDEX public.run_event_payloads_pkey ATTACH PARTITION public.run_event_payloads_p07_pkey;

--
-- Name: run_event_payloads_p08_pkey; Type: INDEX ATTACH; Schema: public; Owner: -
--

ALTER INDEX public.run_event_payloads_pkey ATTACH PARTITION public.run_event_payloads_p08_pkey;

--
-- Name: run_event_payloads_p09_pkey; Type: INDEX ATTACH; Schema: public; Owner: -
--

ALTER INDEX public.run_event_payloads_pkey ATTACH PARTITION public.run_event_payloads_p09_pkey;

--
-- Name: run_event_payloads_p10_pkey; Type: INDEX ATTACH; Schema: public; Owner: -
--

ALTER INDEX public.run_event_payloads_pkey ATTACH PARTITION public.run_event_payloads_p10_pkey;

--
-- Name: run_event_payloads_p11_pkey; Type: INDEX ATTACH; Schema: public; Owner: -
--

ALTER INDEX public.run_event_payloads_pkey ATTACH PARTITION public.run_event_payloads_p11_pkey;

--
-- Name: run_event_payloads_p12_pkey; Type: INDEX ATTACH; Schema: public; Owner: -
--

ALTER INDEX public.run_event_payloads_pkey ATTACH PARTITION public.run_event_payloads_p12_pkey;

--
-- Name: run_event_payloads_p13_pkey; Type: INDEX ATTACH; Schema: public; Owner: -
--

ALTER INDEX public.run_event_payloads_pkey ATTACH PARTITION public.run_event_payloads_p13_pkey;

--
-- Name: run_event_payloads_p14_pkey; Type: INDEX ATTACH; Schema: public; Owner: -
--

ALTER INDEX public.run_event_payloads_pkey ATTACH PARTITION public.run_event_payloads_p14_pkey;

--
-- Name: run_event_payloads_p15_pkey; Type: INDEX ATTACH; Schema: public; Owner: -
--

ALTER INDEX public.run_event_payloads_pkey ATTACH PARTITION public.run_event_payloads_p15_pkey;

--
-- Name: run_event_payloads_p16_pkey; Type: INDEX ATTACH; Schema: public; Owner: -
--

ALTER INDEX public.run_event_payloads_pkey ATTACH PARTITION public.run_event_payloads_p16_pkey;

--
-- Name: run_event_payloads_p17_pkey; Type: INDEX ATTACH; Schema: public; Owner: -
--

ALTER INDEX public.run_event_payloads_pkey ATTACH PARTITION public.run_event_payloads_p17_pkey;

--
-- Name: run_event_payloads_p18_pkey; Type: INDEX ATTACH; Schema: public; Owner: -
--

ALTER INDEX public.run_event_payloads_pkey ATTACH PARTITION public.run_event_payloads_p18_pkey;

--
-- Name: run_event_payloads_p19_pkey; Type: INDEX ATTACH; Schema: public; Owner: -
--

ALTER INDEX public.run_event_payloads_pkey ATTACH PARTITION public.run_event_payloads_p19_pkey;

--
-- Name: run_event_payloads_p20_pkey; Type: INDEX ATTACH; Schema: public; Owner: -
--

ALTER INDEX public.run_event_payloads_pkey ATTACH PARTITION public.run_event_payloads_p20_pkey;

--
-- Name: run_event_payloads_p21_pkey; Type: INDEX ATTACH; Schema: public; Owner: -
--

ALTER INDEX public.run_event_payloads_pkey ATTACH PARTITION public.run_event_payloads_p21_pkey;

--
-- Name: run_event_payloads_p22_pkey; Type: INDEX ATTACH; Schema: public; Owner: -
--

ALTER INDEX public.run_event_payloads_pkey ATTACH PARTITION public.run_event_payloads_p22_pkey;

--
-- Name: run_event_payloads_p23_pkey; Type: INDEX ATTACH; Schema: public; Owner: -
--

ALTER INDEX public.run_event_payloads_pkey ATTACH PARTITION public.run_event_payloads_p23_pkey;

--
-- Name: run_event_payloads_p24_pkey; Type: INDEX ATTACH; Schema: public; Owner: -
--

ALTER INDEX public.run_event_payloads_pkey ATTACH PARTITION public.run_event_payloads_p24_pkey;

--
-- Name: run_event_payloads_p25_pkey; Type: INDEX ATTACH; Schema: public; Owner: -
--

ALTER INDEX public.run_event_payloads_pkey ATTACH PARTITION public.run_event_payloads_p25_pkey;

--
-- Name: run_event_payloads_p26_pkey; Type: INDEX ATTACH; Schema: public; Owner: -
--

ALTER INDEX public.run_event_payloads_pkey ATTACH PARTITION public.run_event_payloads_p26_pkey;

--
-- Name: run_event_payloads_p27_pkey; Type: INDEX ATTACH; Schema: public; Owner: -
--

ALTER INDEX public.run_event_payloads_pkey ATTACH PARTITION public.run_event_payloads_p27_pkey;

--
-- Name: run_event_payloads_p28_pkey; Type: INDEX ATTACH; Schema: public; Owner: -
--

ALTER INDEX public.run_event_payloads_pkey ATTACH PARTITION public.run_event_payloads_p28_pkey;

--
-- Name: run_event_payloads_p29_pkey; Type: INDEX ATTACH; Schema: public; Owner: -
--

ALTER INDEX public.run_event_payloads_pkey ATTACH PARTITION public.run_event_payloads_p29_pkey;

--
-- Name: run_event_payloads_p30_pkey; Type: INDEX ATTACH; Schema: public; Owner: -
--

ALTER INDEX public.run_event_payloads_pkey ATTACH PARTITION public.run_event_payloads_p30_pkey;

--
-- Name: run_event_payloads_p31_pkey; Type: INDEX ATTACH; Schema: public; Owner: -
--

ALTER INDEX public.run_event_payloads_pkey ATTACH PARTITION public.run_event_payloads_p31_pkey;

--
-- Name: run_events_p00_pkey; Type: INDEX ATTACH; Schema: public; Owner: -
--

ALTER INDEX public.run_events_pkey ATTACH PARTITION public.run_events_p00_pkey;

--
-- Name: run_events_p01_pkey; Type: INDEX ATTACH; Schema: public; Owner: -
--

ALTER INDEX public.run_events_pkey ATTACH PARTITION public.run_events_p01_pkey;

--
-- Name: run_events_p02_pkey; Type: INDEX ATTACH; Schema: public; Owner: -
--

ALTER INDEX public.run_events_pkey ATTACH PARTITION public.run_events_p02_pkey;

--
-- Name: run_events_p03_pkey; Type: INDEX ATTACH; Schema: public; Owner: -
--

ALTER INDEX public.run_events_pkey ATTACH PARTITION public.run_events_p03_pkey;

--
-- Name: run_events_p04_pkey; Type: INDEX ATTACH; Schema: public; Owner: -
--

ALTER INDEX public.run_events_pkey ATTACH PARTITION public.run_events_p04_pkey;

--
-- Name: run_events_p05_pkey; Type: INDEX ATTACH; Schema: public; Owner: -
--

ALTER INDEX public.run_events_pkey ATTACH PARTITION public.run_events_p05_pkey;

--
-- Name: run_events_p06_pkey; Type: INDEX ATTACH; Schema: public; Owner: -
--

ALTER INDEX public.run_events_pkey ATTACH PARTITION public.run_events_p06_pkey;

--
-- Name: run_events_p07_pkey; Type: INDEX ATTACH; Schema: public; Owner: -
--

ALTER INDEX public.run_events_pkey ATTACH PARTITION public.run_events_p07_pkey;

--
-- Name: run_events_p08_pkey; Type: INDEX ATTACH; Schema: public; Owner: -
--

ALTER INDEX public.run_events_pkey ATTACH PARTITION public.run_events_p08_pkey;

--
-- Name: run_events_p09_pkey; Type: INDEX ATTACH; Schema: public; Owner: -
--

ALTER INDEX public.run_events_pkey ATTACH PARTITION public.run_events_p09_pkey;

--
-- Name: run_events_p10_pkey; Type: INDEX ATTACH; Schema: public; Owner: -
--

ALTER INDEX public.run_events_pkey ATTACH PARTITION public.run_events_p10_pkey;

--
-- Name: run_events_p11_pkey; Type: INDEX ATTACH; Schema: public; Owner: -
--

ALTER INDEX public.run_events_pkey ATTACH PARTITION public.run_events_p11_pkey;

--
-- Name: run_events_p12_pkey; Type: INDEX ATTACH; Schema: public; Owner: -
--

ALTER INDEX public.run_events_pkey ATTACH PARTITION public.run_events_p12_pkey;

--
-- Name: run_events_p13_pkey; Type: INDEX ATTACH; Schema: public; Owner: -
--

ALTER INDEX public.run_events_pkey ATTACH PARTITION public.run_events_p13_pkey;

--
-- Name: run_events_p14_pkey; Type: INDEX ATTACH; Schema: public; Owner: -
--

ALTER INDEX public.run_events_pkey ATTACH PARTITION public.run_events_p14_pkey;

--
-- Name: run_events_p15_pkey; Type: INDEX ATTACH; Schema: public; Owner: -
--

ALTER INDEX public.run_events_pkey ATTACH PARTITION public.run_events_p15_pkey;

--
-- Name: run_events_p16_pkey; Type: INDEX ATTACH; Schema: public; Owner: -
--

ALTER INDEX public.run_events_pkey ATTACH PARTITION public.run_events_p16_pkey;

--
-- Name: run_events_p17_pkey; Type: INDEX ATTACH; Schema: public; Owner: -
--

ALTER INDEX public.run_events_pkey ATTACH PARTITION public.run_events_p17_pkey;

--
-- Name: run_events_p18_pkey; Type: INDEX ATTACH; Schema: public; Owner: -
--

ALTER INDEX public.run_events_pkey ATTACH PARTITION public.run_events_p18_pkey;

--
-- Name: run_events_p19_pkey; Type: INDEX ATTACH; Schema: public; Owner: -
--

ALTER INDEX public.run_events_pkey ATTACH PARTITION public.run_events_p19_pkey;

--
-- Name: run_events_p20_pkey; Type: INDEX ATTACH; Schema: public; Owner: -
--

ALTER INDEX public.run_events_pkey ATTACH PARTITION public.run_events_p20_pkey;

--
-- Name: run_events_p21_pkey; Type: INDEX ATTACH; Schema: public; Owner: -
--

ALTER INDEX public.run_events_pkey ATTACH PARTITION public.run_events_p21_pkey;

--
-- Name: run_events_p22_pkey; Type: INDEX ATTACH; Schema: public; Owner: -
--

ALTER INDEX public.run_events_pkey ATTACH PARTITION public.run_events_p22_pkey;

--
-- Name: run_events_p23_pkey; Type: INDEX ATTACH; Schema: public; Owner: -
--

ALTER INDEX public.run_events_pkey ATTACH PARTITION public.run_events_p23_pkey;

--
-- Name: run_events_p24_pkey; Type: INDEX ATTACH; Schema: public; Owner: -
--

ALTER INDEX public.run_events_pkey ATTACH PARTITION public.run_events_p24_pkey;

--
-- Name: run_events_p25_pkey; Type: INDEX ATTACH; Schema: public; Owner: -
--

ALTER INDEX public.run_events_pkey ATTACH PARTITION public.run_events_p25_pkey;

--
-- Name: run_events_p26_pkey; Type: INDEX ATTACH; Schema: public; Owner: -
--

ALTER INDEX public.run_events_pkey ATTACH PARTITION public.run_events_p26_pkey;

--
-- Name: run_events_p27_pkey; Type: INDEX ATTACH; Schema: public; Owner: -
--

ALTER INDEX public.run_events_pkey ATTACH PARTITION public.run_events_p27_pkey;

--
-- Name: run_events_p28_pkey; Type: INDEX ATTACH; Schema: public; Owner: -
--

ALTER INDEX public.run_events_pkey ATTACH PARTITION public.run_events_p28_pkey;

--
-- Name: run_events_p29_pkey; Type: INDEX ATTACH; Schema: public; Owner: -
--

ALTER INDEX public.run_events_pkey ATTACH PARTITION public.run_events_p29_pkey;

--
-- Name: run_events_p30_pkey; Type: INDEX ATTACH; Schema: public; Owner: -
--

ALTER INDEX public.run_events_pkey ATTACH PARTITION public.run_events_p30_pkey;

--
-- Name: run_events_p31_pkey; Type: INDEX ATTACH; Schema: public; Owner: -
--

ALTER INDEX public.run_events_pkey ATTACH PARTITION public.run_events_p31_pkey;

--
-- Name: account_changes account_changes_append_only; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER account_changes_append_only BEFORE DELETE OR UPDATE ON public.account_changes FOR EACH ROW EXECUTE FUNCTION public.tenantry_refuse_change_but_retention();

--
-- Name: activity_bundles activity_bundles_refuse_frozen; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER activity_bundles_refuse_frozen BEFORE INSERT OR UPDATE ON public.activity_bundles FOR EACH ROW EXECUTE FUNCTION public.tenantry_refuse_frozen();

--
-- Name: activity_versions activity_versions_refuse_frozen; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER activity_versions_refuse_frozen BEFORE INSERT OR UPDATE ON public.activity_versions FOR EACH ROW EXECUTE FUNCTION public.tenantry_refuse_frozen();

--
-- Name: agent_evaluations agent_evaluations_refuse_frozen; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER agent_evaluations_refuse_frozen BEFORE INSERT OR UPDATE ON public.agent_evaluations FOR EACH ROW EXECUTE FUNCTION public.tenantry_refuse_frozen();

--
-- Name: agent_model_snapshot_promotions agent_model_snapshot_promotions_refuse_frozen; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER agent_model_snapshot_promotions_refuse_frozen BEFORE INSERT OR UPDATE ON public.agent_model_snapshot_promotions FOR EACH ROW EXECUTE FUNCTION public.tenantry_refuse_frozen();

--
-- Name: agent_model_snapshots agent_model_snapshots_owners_follow; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER agent_model_snapshots_owners_follow BEFORE UPDATE ON public.agent_model_snapshots FOR EACH ROW EXECUTE FUNCTION public.tenantry_snapshot_owners_follow();

--
-- Name: agent_model_snapshots agent_model_snapshots_refuse_frozen; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER agent_model_snapshots_refuse_frozen BEFORE INSERT OR UPDATE ON public.agent_model_snapshots FOR EACH ROW EXECUTE FUNCTION public.tenantry_refuse_frozen();

--
-- Name: agent_promotions agent_promotions_refuse_frozen; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER agent_promotions_refuse_frozen BEFORE INSERT OR UPDATE ON public.agent_promotions FOR EACH ROW EXECUTE FUNCTION public.tenantry_refuse_frozen();

--
-- Name: agent_test_sets agent_test_sets_refuse_frozen; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER agent_test_sets_refuse_frozen BEFORE INSERT OR UPDATE ON public.agent_test_sets FOR EACH ROW EXECUTE FUNCTION public.tenantry_refuse_frozen();

--
-- Name: agent_version_flags agent_version_flags_refuse_frozen; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER agent_version_flags_refuse_frozen BEFORE INSERT OR UPDATE ON public.agent_version_flags FOR EACH ROW EXECUTE FUNCTION public.tenantry_refuse_frozen();

--
-- Name: agent_versions agent_versions_immutable; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER agent_versions_immutable BEFORE DELETE OR UPDATE ON public.agent_versions FOR EACH ROW EXECUTE FUNCTION public.tenantry_refuse_change();

--
-- Name: agent_versions agent_versions_refuse_frozen; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER agent_versions_refuse_frozen BEFORE INSERT OR UPDATE ON public.agent_versions FOR EACH ROW EXECUTE FUNCTION public.tenantry_refuse_frozen();

--
-- Name: agents agents_refuse_frozen; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER agents_refuse_frozen BEFORE INSERT OR UPDATE ON public.agents FOR EACH ROW EXECUTE FUNCTION public.tenantry_refuse_frozen();

--
-- Name: api_keys api_keys_refuse_frozen; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER api_keys_refuse_frozen BEFORE INSERT OR UPDATE ON public.api_keys FOR EACH ROW EXECUTE FUNCTION public.tenantry_refuse_frozen();

--
-- Name: app_sessions app_sessions_refuse_frozen; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER app_sessions_refuse_frozen BEFORE INSERT OR UPDATE ON public.app_sessions FOR EACH ROW EXECUTE FUNCTION public.tenantry_refuse_frozen();

--
-- Name: approvals approvals_refuse_frozen; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER approvals_refuse_frozen BEFORE INSERT OR UPDATE ON public.approvals FOR EACH ROW EXECUTE FUNCTION public.tenantry_refuse_frozen();

--
-- Name: audit_log audit_log_append_only; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER audit_log_append_only BEFORE DELETE OR UPDATE ON public.audit_log FOR EACH ROW EXECUTE FUNCTION public.tenantry_refuse_change_but_retention();

--
-- Name: billing_reconciliations billing_reconciliations_immutable; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER billing_reconciliations_immutable BEFORE DELETE OR UPDATE ON public.billing_reconciliations FOR EACH ROW EXECUTE FUNCTION public.tenantry_refuse_change();

--
-- Name: evaluation_results evaluation_results_refuse_frozen; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER evaluation_results_refuse_frozen BEFORE INSERT OR UPDATE ON public.evaluation_results FOR EACH ROW EXECUTE FUNCTION public.tenantry_refuse_frozen();

--
-- Name: evaluation_runs evaluation_runs_refuse_frozen; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER evaluation_runs_refuse_frozen BEFORE INSERT OR UPDATE ON public.evaluation_runs FOR EACH ROW EXECUTE FUNCTION public.tenantry_refuse_frozen();

--
-- Name: frozen_tenants frozen_tenants_changed; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER frozen_tenants_changed AFTER INSERT OR DELETE OR UPDATE ON public.frozen_tenants FOR EACH STATEMENT EXECUTE FUNCTION public.tenantry_frozen_changed();

--
-- Name: model_accounts model_accounts_refuse_frozen; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER model_accounts_refuse_frozen BEFORE INSERT OR UPDATE ON public.model_accounts FOR EACH ROW EXECUTE FUNCTION public.tenantry_refuse_frozen();

--
-- Name: model_prices model_prices_immutable; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER model_prices_immutable BEFORE DELETE OR UPDATE ON public.model_prices FOR EACH ROW EXECUTE FUNCTION public.tenantry_refuse_change();

--
-- Name: retention_policies retention_policies_refuse_frozen; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER retention_policies_refuse_frozen BEFORE INSERT OR UPDATE ON public.retention_policies FOR EACH ROW EXECUTE FUNCTION public.tenantry_refuse_frozen();

--
-- Name: run_events run_events_immutable; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER run_events_immutable BEFORE DELETE OR UPDATE ON public.run_events FOR EACH ROW EXECUTE FUNCTION public.tenantry_refuse_change_but_retention();

--
-- Name: run_events run_events_notify; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER run_events_notify AFTER INSERT ON public.run_events FOR EACH ROW EXECUTE FUNCTION public.tenantry_notify_event();

--
-- Name: runs runs_count; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER runs_count AFTER UPDATE OF status ON public.runs FOR EACH ROW EXECUTE FUNCTION public.tenantry_count_runs();

--
-- Name: runs runs_count_ended; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER runs_count_ended AFTER UPDATE OF status ON public.runs FOR EACH ROW EXECUTE FUNCTION public.tenantry_count_ended_runs();

--
-- Name: runs runs_count_ended_deleted; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER runs_count_ended_deleted AFTER DELETE ON public.runs FOR EACH ROW WHEN (((old.status = ANY (ARRAY['finished'::text, 'failed'::text, 'cancelled'::text])) AND (NOT public.tenantry_retention_under_way()))) EXECUTE FUNCTION public.tenantry_count_ended_runs();

--
-- Name: runs runs_count_inserted; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER runs_count_inserted AFTER INSERT ON public.runs REFERENCING NEW TABLE AS inserted FOR EACH STATEMENT EXECUTE FUNCTION public.tenantry_count_inserted_runs();

--
-- Name: runs runs_forget_spend_cap; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER runs_forget_spend_cap BEFORE UPDATE OF status ON public.runs FOR EACH ROW WHEN (((old.waiting_cap_micros IS NOT NULL) AND (new.status <> 'waiting'::text))) EXECUTE FUNCTION public.tenantry_forget_spend_cap();

--
-- Name: runs runs_notify_runnable; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER runs_notify_runnable AFTER UPDATE OF status ON public.runs FOR EACH ROW EXECUTE FUNCTION public.tenantry_notify_runnable();

--
-- Name: runs runs_notify_runnable_inserted; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER runs_notify_runnable_inserted AFTER INSERT ON public.runs REFERENCING NEW TABLE AS inserted FOR EACH STATEMENT EXECUTE FUNCTION public.tenantry_notify_inserted_runnable();

--
-- Name: runs runs_refuse_frozen; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER runs_refuse_frozen BEFORE INSERT OR UPDATE ON public.runs FOR EACH ROW EXECUTE FUNCTION public.tenantry_refuse_frozen();

--
-- Name: runs runs_uncount_deleted; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER runs_uncount_deleted AFTER DELETE ON public.runs FOR EACH ROW WHEN ((old.status = ANY (ARRAY['queued'::text, 'running'::text, 'waiting'::text]))) EXECUTE FUNCTION public.tenantry_uncount_deleted_run();

--
-- Name: runs runs_wake_parent; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER runs_wake_parent BEFORE UPDATE OF status ON public.runs FOR EACH ROW WHEN (((new.kind = 'agent'::text) AND (new.parent_run_id IS NOT NULL) AND (new.status = ANY (ARRAY['finished'::text, 'failed'::text, 'cancelled'::text])) AND (old.status <> ALL (ARRAY['finished'::text, 'failed'::text, 'cancelled'::text])))) EXECUTE FUNCTION public.tenantry_wake_parent();

--
-- Name: sandbox_usage_facts sandbox_usage_facts_immutable; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER sandbox_usage_facts_immutable BEFORE DELETE OR UPDATE ON public.sandbox_usage_facts FOR EACH ROW EXECUTE FUNCTION public.tenantry_refuse_change();

--
-- Name: secrets secrets_refuse_frozen; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER secrets_refuse_frozen BEFORE INSERT OR UPDATE ON public.secrets FOR EACH ROW EXECUTE FUNCTION public.tenantry_refuse_frozen();

--
-- Name: sign_in_links sign_in_links_refuse_frozen; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER sign_in_links_refuse_frozen BEFORE INSERT OR UPDATE ON public.sign_in_links FOR EACH ROW EXECUTE FUNCTION public.tenantry_refuse_frozen();

--
-- Name: tenant_keys tenant_keys_refuse_frozen; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER tenant_keys_refuse_frozen BEFORE INSERT OR UPDATE ON public.tenant_keys FOR EACH ROW EXECUTE FUNCTION public.tenantry_refuse_frozen();

--
-- Name: tenant_policies tenant_policies_cap_changed; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER tenant_policies_cap_changed AFTER UPDATE OF monthly_spend_cap_micros ON public.tenant_policies FOR EACH ROW WHEN ((old.monthly_spend_cap_micros IS DISTINCT FROM new.monthly_spend_cap_micros)) EXECUTE FUNCTION public.tenantry_cap_changed();

--
-- Name: tenant_policies tenant_policies_refuse_frozen; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER tenant_policies_refuse_frozen BEFORE INSERT OR UPDATE ON public.tenant_policies FOR EACH ROW EXECUTE FUNCTION public.tenantry_refuse_frozen();

--
-- Name: tenant_users tenant_users_refuse_frozen; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER tenant_users_refuse_frozen BEFORE INSERT OR UPDATE ON public.tenant_users FOR EACH ROW EXECUTE FUNCTION public.tenantry_refuse_frozen();

--
-- Name: tenants tenants_policy; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER tenants_policy AFTER INSERT ON public.tenants FOR EACH ROW EXECUTE FUNCTION public.tenantry_new_tenant();

--
-- Name: tenants tenants_refuse_frozen; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER tenants_refuse_frozen BEFORE INSERT OR UPDATE ON public.tenants FOR EACH ROW EXECUTE FUNCTION public.tenantry_refuse_frozen();

--
-- Name: test_case_sources test_case_sources_refuse_frozen; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER test_case_sources_refuse_frozen BEFORE INSERT OR UPDATE ON public.test_case_sources FOR EACH ROW EXECUTE FUNCTION public.tenantry_refuse_frozen();

--
-- Name: tombstones tombstones_immutable; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER tombstones_immutable BEFORE DELETE OR UPDATE ON public.tombstones FOR EACH ROW EXECUTE FUNCTION public.tenantry_refuse_change_but_retention();

--
-- Name: tool_server_oauth tool_server_oauth_refuse_frozen; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER tool_server_oauth_refuse_frozen BEFORE INSERT OR UPDATE ON public.tool_server_oauth FOR EACH ROW EXECUTE FUNCTION public.tenantry_refuse_frozen();

--
-- Name: tool_server_oauth tool_server_oauth_wake_authorized; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER tool_server_oauth_wake_authorized AFTER UPDATE OF status ON public.tool_server_oauth FOR EACH ROW WHEN (((new.status = 'connected'::text) AND (old.status IS DISTINCT FROM new.status))) EXECUTE FUNCTION public.tenantry_wake_authorized();

--
-- Name: tool_servers tool_servers_refuse_frozen; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER tool_servers_refuse_frozen BEFORE INSERT OR UPDATE ON public.tool_servers FOR EACH ROW EXECUTE FUNCTION public.tenantry_refuse_frozen();

--
-- Name: usage_facts usage_facts_immutable; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER usage_facts_immutable BEFORE DELETE OR UPDATE ON public.usage_facts FOR EACH ROW EXECUTE FUNCTION public.tenantry_refuse_change();

--
-- Name: activity_bundles activity_bundles_tenant_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.activity_bundles
    ADD CONSTRAINT activity_bundles_tenant_id_fkey FOREIGN KEY (tenant_id) REFERENCES public.tenants(tenant_id);

--
-- Name: activity_versions activity_versions_tenant_id_agent_id_version_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.activity_versions
    ADD CONSTRAINT activity_versions_tenant_id_agent_id_version_fkey FOREIGN KEY (tenant_id, agent_id, version) REFERENCES public.agent_versions(tenant_id, agent_id, version);

--
-- Name: activity_versions activity_versions_tenant_id_bundle_digest_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.activity_versions
    ADD CONSTRAINT activity_versions_tenant_id_bundle_digest_fkey FOREIGN KEY (tenant_id, bundle_digest) REFERENCES public.activity_bundles(tenant_id, digest);

--
-- Name: agent_evaluations agent_evaluations_tenant_id_agent_id_baseline_version_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.agent_evaluations
    ADD CONSTRAINT agent_evaluations_tenant_id_agent_id_baseline_version_fkey FOREIGN KEY (tenant_id, agent_id, baseline_version) REFERENCES public.agent_versions(tenant_id, agent_id, version);

--
-- Name: agent_evaluations agent_evaluations_tenant_id_agent_id_candidate_version_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.agent_evaluations
    ADD CONSTRAINT agent_evaluations_tenant_id_agent_id_candidate_version_fkey FOREIGN KEY (tenant_id, agent_id, candidate_version) REFERENCES public.agent_versions(tenant_id, agent_id, version);

--
-- Name: agent_evaluations agent_evaluations_tenant_id_test_set_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.agent_evaluations
    ADD CONSTRAINT agent_evaluations_tenant_id_test_set_id_fkey FOREIGN KEY (tenant_id, test_set_id) REFERENCES public.agent_test_sets(tenant_id, test_set_id);

--
-- Name: agent_model_snapshot_promotions agent_model_snapshot_promotions_tenant_id_agent_id_model_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.agent_model_snapshot_promotions
    ADD CONSTRAINT agent_model_snapshot_promotions_tenant_id_agent_id_model_fkey FOREIGN KEY (tenant_id, agent_id, model) REFERENCES public.agent_model_snapshots(tenant_id, agent_id, model);

--
-- Name: agent_model_snapshots agent_model_snapshots_tenant_id_agent_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.agent_model_snapshots
    ADD CONSTRAINT agent_model_snapshots_tenant_id_agent_id_fkey FOREIGN KEY (tenant_id, agent_id) REFERENCES public.agents(tenant_id, agent_id);

--
-- Name: agent_promotions agent_promotions_tenant_id_agent_id_version_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.agent_promotions
    ADD CONSTRAINT agent_promotions_tenant_id_agent_id_version_fkey FOREIGN KEY (tenant_id, agent_id, version) REFERENCES public.agent_versions(tenant_id, agent_id, version);

--
-- Name: agent_test_sets agent_test_sets_tenant_id_agent_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.agent_test_sets
    ADD CONSTRAINT agent_test_sets_tenant_id_agent_id_fkey FOREIGN KEY (tenant_id, agent_id) REFERENCES public.agents(tenant_id, agent_id);

--
-- Name: agent_version_flags agent_version_flags_tenant_id_agent_id_version_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.agent_version_flags
    ADD CONSTRAINT agent_version_flags_tenant_id_agent_id_version_fkey FOREIGN KEY (tenant_id, agent_id, version) REFERENCES public.agent_versions(tenant_id, agent_id, version);

--
-- Name: agent_versions agent_versions_tenant_id_agent_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.agent_versions
    ADD CONSTRAINT agent_versions_tenant_id_agent_id_fkey FOREIGN KEY (tenant_id, agent_id) REFERENCES public.agents(tenant_id, agent_id);

--
-- Name: agents agents_tenant_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.agents
    ADD CONSTRAINT agents_tenant_id_fkey FOREIGN KEY (tenant_id) REFERENCES public.tenants(tenant_id);

--
-- Name: api_keys api_keys_tenant_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.api_keys
    ADD CONSTRAINT api_keys_tenant_id_fkey FOREIGN KEY (tenant_id) REFERENCES public.tenants(tenant_id);

--
-- Name: app_sessions app_sessions_tenant_id_user_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.app_sessions
    ADD CONSTRAINT app_sessions_tenant_id_user_id_fkey FOREIGN KEY (tenant_id, user_id) REFERENCES public.tenant_users(tenant_id, user_id);

--
-- Name: approvals approvals_tenant_id_run_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.approvals
    ADD CONSTRAINT approvals_tenant_id_run_id_fkey FOREIGN KEY (tenant_id, run_id) REFERENCES public.runs(tenant_id, run_id);

--
-- Name: billing_reconcile_days billing_reconcile_days_reconciliation_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.billing_reconcile_days
    ADD CONSTRAINT billing_reconcile_days_reconciliation_id_fkey FOREIGN KEY (reconciliation_id) REFERENCES public.billing_reconciliations(reconciliation_id);

--
-- Name: blob_deletions blob_deletions_tenant_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.blob_deletions
    ADD CONSTRAINT blob_deletions_tenant_id_fkey FOREIGN KEY (tenant_id) REFERENCES public.tenants(tenant_id);

--
-- Name: budget_reservations budget_reservations_tenant_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.budget_reservations
    ADD CONSTRAINT budget_reservations_tenant_id_fkey FOREIGN KEY (tenant_id) REFERENCES public.tenants(tenant_id);

--
-- Name: budget_reservations budget_reservations_tenant_id_run_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.budget_reservations
    ADD CONSTRAINT budget_reservations_tenant_id_run_id_fkey FOREIGN KEY (tenant_id, run_id) REFERENCES public.runs(tenant_id, run_id);

--
-- Name: cleanup_leases cleanup_leases_tenant_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.cleanup_leases
    ADD CONSTRAINT cleanup_leases_tenant_id_fkey FOREIGN KEY (tenant_id) REFERENCES public.tenants(tenant_id);

--
-- Name: endpoint_deliveries endpoint_deliveries_tenant_id_endpoint_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.endpoint_deliveries
    ADD CONSTRAINT endpoint_deliveries_tenant_id_endpoint_id_fkey FOREIGN KEY (tenant_id, endpoint_id) REFERENCES public.webhook_endpoints(tenant_id, endpoint_id) ON DELETE CASCADE;

--
-- Name: endpoint_deliveries endpoint_deliveries_tenant_id_run_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.endpoint_deliveries
    ADD CONSTRAINT endpoint_deliveries_tenant_id_run_id_fkey FOREIGN KEY (tenant_id, run_id) REFERENCES public.runs(tenant_id, run_id) ON DELETE CASCADE;

--
-- Name: erase_jobs erase_jobs_tenant_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.erase_jobs
    ADD CONSTRAINT erase_jobs_tenant_id_fkey FOREIGN KEY (tenant_id) REFERENCES public.tenants(tenant_id);

--
-- Name: evaluation_results evaluation_results_tenant_id_run_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.evaluation_results
    ADD CONSTRAINT evaluation_results_tenant_id_run_id_fkey FOREIGN KEY (tenant_id, run_id) REFERENCES public.evaluation_runs(tenant_id, run_id);

--
-- Name: evaluation_runs evaluation_runs_tenant_id_evaluation_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.evaluation_runs
    ADD CONSTRAINT evaluation_runs_tenant_id_evaluation_id_fkey FOREIGN KEY (tenant_id, evaluation_id) REFERENCES public.agent_evaluations(tenant_id, evaluation_id);

--
-- Name: exports exports_tenant_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.exports
    ADD CONSTRAINT exports_tenant_id_fkey FOREIGN KEY (tenant_id) REFERENCES public.tenants(tenant_id);

--
-- Name: model_accounts model_accounts_tenant_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.model_accounts
    ADD CONSTRAINT model_accounts_tenant_id_fkey FOREIGN KEY (tenant_id) REFERENCES public.tenants(tenant_id);

--
-- Name: operator_sign_in_links operator_sign_in_links_user_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.operator_sign_in_links
    ADD CONSTRAINT operator_sign_in_links_user_id_fkey FOREIGN KEY (user_id) REFERENCES public.operator_users(user_id);

--
-- Name: retention_policies retention_policies_tenant_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.retention_policies
    ADD CONSTRAINT retention_policies_tenant_id_fkey FOREIGN KEY (tenant_id) REFERENCES public.tenants(tenant_id);

--
-- Name: run_event_payloads_p00 run_event_payloads_p00_event_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.run_event_payloads_p00
    ADD CONSTRAINT run_event_payloads_p00_event_fkey FOREIGN KEY (tenant_id, run_id, seq) REFERENCES public.run_events_p00(tenant_id, run_id, seq);

--
-- Name: run_event_payloads_p01 run_event_payloads_p01_event_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.run_event_payloads_p01
    ADD CONSTRAINT run_event_payloads_p01_event_fkey FOREIGN KEY (tenant_id, run_id, seq) REFERENCES public.run_events_p01(tenant_id, run_id, seq);

--
-- Name: run_event_payloads_p02 run_event_payloads_p02_event_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.run_event_payloads_p02
    ADD CONSTRAINT run_event_payloads_p02_event_fkey FOREIGN KEY (tenant_id, run_id, seq) REFERENCES public.run_events_p02(tenant_id, run_id, seq);

--
-- Name: run_event_payloads_p03 run_event_payloads_p03_event_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.run_event_payloads_p03
    ADD CONSTRAINT run_event_payloads_p03_event_fkey FOREIGN KEY (tenant_id, run_id, seq) REFERENCES public.run_events_p03(tenant_id, run_id, seq);

--
-- Name: run_event_payloads_p04 run_event_payloads_p04_event_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.run_event_payloads_p04
    ADD CONSTRAINT run_event_payloads_p04_event_fkey FOREIGN KEY (tenant_id, run_id, seq) REFERENCES public.run_events_p04(tenant_id, run_id, seq);

--
-- Name: run_event_payloads_p05 run_event_payloads_p05_event_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.run_event_payloads_p05
    ADD CONSTRAINT run_event_payloads_p05_event_fkey FOREIGN KEY (tenant_id, run_id, seq) REFERENCES public.run_events_p05(tenant_id, run_id, seq);

--
-- Name: run_event_payloads_p06 run_event_payloads_p06_event_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.run_event_payloads_p06
    ADD CONSTRAINT run_event_payloads_p06_event_fkey FOREIGN KEY (tenant_id, run_id, seq) REFERENCES public.run_events_p06(tenant_id, run_id, seq);

--
-- Name: run_event_payloads_p07 run_event_payloads_p07_event_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.run_event_payloads_p07
    ADD CONSTRAINT run_event_payloads_p07_event_fkey FOREIGN KEY (tenant_id, run_id, seq) REFERENCES public.run_events_p07(tenant_id, run_id, seq);

--
-- Name: run_event_payloads_p08 run_event_payloads_p08_event_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.run_event_payloads_p08
    ADD CONSTRAINT run_event_payloads_p08_event_fkey FOREIGN KEY (tenant_id, run_id, seq) REFERENCES public.run_events_p08(tenant_id, run_id, seq);

--
-- Name: run_event_payloads_p09 run_event_payloads_p09_event_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.run_event_payloads_p09
    ADD CONSTRAINT run_event_payloads_p09_event_fkey FOREIGN KEY (tenant_id, run_id, seq) REFERENCES public.run_events_p09(tenant_id, run_id, seq);

--
-- Name: run_event_payloads_p10 run_event_payloads_p10_event_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.run_event_payloads_p10
    ADD CONSTRAINT run_event_payloads_p10_event_fkey FOREIGN KEY (tenant_id, run_id, seq) REFERENCES public.run_events_p10(tenant_id, run_id, seq);

--
-- Name: run_event_payloads_p11 run_event_payloads_p11_event_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.run_event_payloads_p11
    ADD CONSTRAINT run_event_payloads_p11_event_fkey FOREIGN KEY (tenant_id, run_id, seq) REFERENCES public.run_events_p11(tenant_id, run_id, seq);

--
-- Name: run_event_payloads_p12 run_event_payloads_p12_event_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.run_event_payloads_p12
    ADD CONSTRAINT run_event_payloads_p12_event_fkey FOREIGN KEY (tenant_id, run_id, seq) REFERENCES public.run_events_p12(tenant_id, run_id, seq);

--
-- Name: run_event_payloads_p13 run_event_payloads_p13_event_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.run_event_payloads_p13
    ADD CONSTRAINT run_event_payloads_p13_event_fkey FOREIGN KEY (tenant_id, run_id, seq) REFERENCES public.run_events_p13(tenant_id, run_id, seq);

--
-- Name: run_event_payloads_p14 run_event_payloads_p14_event_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.run_event_payloads_p14
    ADD CONSTRAINT run_event_payloads_p14_event_fkey FOREIGN KEY (tenant_id, run_id, seq) REFERENCES public.run_events_p14(tenant_id, run_id, seq);

--
-- Name: run_event_payloads_p15 run_event_payloads_p15_event_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.run_event_payloads_p15
    ADD CONSTRAINT run_event_payloads_p15_event_fkey FOREIGN KEY (tenant_id, run_id, seq) REFERENCES public.run_events_p15(tenant_id, run_id, seq);

--
-- Name: run_event_payloads_p16 run_event_payloads_p16_event_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.run_event_payloads_p16
    ADD CONSTRAINT run_event_payloads_p16_event_fkey FOREIGN KEY (tenant_id, run_id, seq) REFERENCES public.run_events_p16(tenant_id, run_id, seq);

--
-- Name: run_event_payloads_p17 run_event_payloads_p17_event_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.run_event_payloads_p17
    ADD CONSTRAINT run_event_payloads_p17_event_fkey FOREIGN KEY (tenant_id, run_id, seq) REFERENCES public.run_events_p17(tenant_id, run_id, seq);

--
-- Name: run_event_payloads_p18 run_event_payloads_p18_event_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.run_event_payloads_p18
    ADD CONSTRAINT run_event_payloads_p18_event_fkey FOREIGN KEY (tenant_id, run_id, seq) REFERENCES public.run_events_p18(tenant_id, run_id, seq);

--
-- Name: run_event_payloads_p19 run_event_payloads_p19_event_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.run_event_payloads_p19
    ADD CONSTRAINT run_event_payloads_p19_event_fkey FOREIGN KEY (tenant_id, run_id, seq) REFERENCES public.run_events_p19(tenant_id, run_id, seq);

--
-- Name: run_event_payloads_p20 run_event_payloads_p20_event_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.run_event_payloads_p20
    ADD CONSTRAINT run_event_payloads_p20_event_fkey FOREIGN KEY (tenant_id, run_id, seq) REFERENCES public.run_events_p20(tenant_id, run_id, seq);

--
-- Name: run_event_payloads_p21 run_event_payloads_p21_event_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.run_event_payloads_p21
    ADD CONSTRAINT run_event_payloads_p21_event_fkey FOREIGN KEY (tenant_id, run_id, seq) REFERENCES public.run_events_p21(tenant_id, run_id, seq);

--
-- Name: run_event_payloads_p22 run_event_payloads_p22_event_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.run_event_payloads_p22
    ADD CONSTRAINT run_event_payloads_p22_event_fkey FOREIGN KEY (tenant_id, run_id, seq) REFERENCES public.run_events_p22(tenant_id, run_id, seq);

--
-- Name: run_event_payloads_p23 run_event_payloads_p23_event_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.run_event_payloads_p23
    ADD CONSTRAINT run_event_payloads_p23_event_fkey FOREIGN KEY (tenant_id, run_id, seq) REFERENCES public.run_events_p23(tenant_id, run_id, seq);

--
-- Name: run_event_payloads_p24 run_event_payloads_p24_event_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.run_event_payloads_p24
    ADD CONSTRAINT run_event_payloads_p24_event_fkey FOREIGN KEY (tenant_id, run_id, seq) REFERENCES public.run_events_p24(tenant_id, run_id, seq);

--
-- Name: run_event_payloads_p25 run_event_payloads_p25_event_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.run_event_payloads_p25
    ADD CONSTRAINT run_event_payloads_p25_event_fkey FOREIGN KEY (tenant_id, run_id, seq) REFERENCES public.run_events_p25(tenant_id, run_id, seq);

--
-- Name: run_event_payloads_p26 run_event_payloads_p26_event_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.run_event_payloads_p26
    ADD CONSTRAINT run_event_payloads_p26_event_fkey FOREIGN KEY (tenant_id, run_id, seq) REFERENCES public.run_events_p26(tenant_id, run_id, seq);

--
-- Name: run_event_payloads_p27 run_event_payloads_p27_event_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.run_event_payloads_p27
    ADD CONSTRAINT run_event_payloads_p27_event_fkey FOREIGN KEY (tenant_id, run_id, seq) REFERENCES public.run_events_p27(tenant_id, run_id, seq);

--
-- Name: run_event_payloads_p28 run_event_payloads_p28_event_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.run_event_payloads_p28
    ADD CONSTRAINT run_event_payloads_p28_event_fkey FOREIGN KEY (tenant_id, run_id, seq) REFERENCES public.run_events_p28(tenant_id, run_id, seq);

--
-- Name: run_event_payloads_p29 run_event_payloads_p29_event_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.run_event_payloads_p29
    ADD CONSTRAINT run_event_payloads_p29_event_fkey FOREIGN KEY (tenant_id, run_id, seq) REFERENCES public.run_events_p29(tenant_id, run_id, seq);

--
-- Name: run_event_payloads_p30 run_event_payloads_p30_event_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.run_event_payloads_p30
    ADD CONSTRAINT run_event_payloads_p30_event_fkey FOREIGN KEY (tenant_id, run_id, seq) REFERENCES public.run_events_p30(tenant_id, run_id, seq);

--
-- Name: run_event_payloads_p31 run_event_payloads_p31_event_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.run_event_payloads_p31
    ADD CONSTRAINT run_event_payloads_p31_event_fkey FOREIGN KEY (tenant_id, run_id, seq) REFERENCES public.run_events_p31(tenant_id, run_id, seq);

--
-- Name: run_events run_events_tenant_id_run_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE public.run_events
    ADD CONSTRAINT run_events_tenant_id_run_id_fkey FOREIGN KEY (tenant_id, run_id) REFERENCES public.runs(tenant_id, run_id);

--
-- Name: run_status_totals run_status_totals_tenant_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.run_status_totals
    ADD CONSTRAINT run_status_totals_tenant_id_fkey FOREIGN KEY (tenant_id) REFERENCES public.tenants(tenant_id);

--
-- Name: runs runs_tenant_id_agent_id_agent_version_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.runs
    ADD CONSTRAINT runs_tenant_id_agent_id_agent_version_fkey FOREIGN KEY (tenant_id, agent_id, agent_version) REFERENCES public.agent_versions(tenant_id, agent_id, version);

--
-- Name: runs runs_tenant_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.runs
    ADD CONSTRAINT runs_tenant_id_fkey FOREIGN KEY (tenant_id) REFERENCES public.tenants(tenant_id);

--
-- Name: sandbox_usage_facts sandbox_usage_facts_tenant_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.sandbox_usage_facts
    ADD CONSTRAINT sandbox_usage_facts_tenant_id_fkey FOREIGN KEY (tenant_id) REFERENCES public.tenants(tenant_id);

--
-- Name: secrets secrets_tenant_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.secrets
    ADD CONSTRAINT secrets_tenant_id_fkey FOREIGN KEY (tenant_id) REFERENCES public.tenants(tenant_id);

--
-- Name: sign_in_links sign_in_links_tenant_id_user_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.sign_in_links
    ADD CONSTRAINT sign_in_links_tenant_id_user_id_fkey FOREIGN KEY (tenant_id, user_id) REFERENCES public.tenant_users(tenant_id, user_id);

--
-- Name: tenant_budget tenant_budget_tenant_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.tenant_budget
    ADD CONSTRAINT tenant_budget_tenant_id_fkey FOREIGN KEY (tenant_id) REFERENCES public.tenants(tenant_id);

--
-- Name: tenant_keys tenant_keys_tenant_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.tenant_keys
    ADD CONSTRAINT tenant_keys_tenant_id_fkey FOREIGN KEY (tenant_id) REFERENCES public.tenants(tenant_id);

--
-- Name: tenant_load tenant_load_tenant_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.tenant_load
    ADD CONSTRAINT tenant_load_tenant_id_fkey FOREIGN KEY (tenant_id) REFERENCES public.tenants(tenant_id);

--
-- Name: tenant_policies tenant_policies_tenant_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.tenant_policies
    ADD CONSTRAINT tenant_policies_tenant_id_fkey FOREIGN KEY (tenant_id) REFERENCES public.tenants(tenant_id);

--
-- Name: tenant_users tenant_users_tenant_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.tenant_users
    ADD CONSTRAINT tenant_users_tenant_id_fkey FOREIGN KEY (tenant_id) REFERENCES public.tenants(tenant_id);

--
-- Name: test_case_sources test_case_sources_tenant_id_test_set_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.test_case_sources
    ADD CONSTRAINT test_case_sources_tenant_id_test_set_id_fkey FOREIGN KEY (tenant_id, test_set_id) REFERENCES public.agent_test_sets(tenant_id, test_set_id);

--
-- Name: tombstones tombstones_tenant_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.tombstones
    ADD CONSTRAINT tombstones_tenant_id_fkey FOREIGN KEY (tenant_id) REFERENCES public.tenants(tenant_id);

--
-- Name: tool_server_oauth tool_server_oauth_tenant_id_server_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.tool_server_oauth
    ADD CONSTRAINT tool_server_oauth_tenant_id_server_id_fkey FOREIGN KEY (tenant_id, server_id) REFERENCES public.tool_servers(tenant_id, server_id) ON DELETE CASCADE;

--
-- Name: tool_servers tool_servers_tenant_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.tool_servers
    ADD CONSTRAINT tool_servers_tenant_id_fkey FOREIGN KEY (tenant_id) REFERENCES public.tenants(tenant_id);

--
-- Name: usage_facts usage_facts_tenant_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.usage_facts
    ADD CONSTRAINT usage_facts_tenant_id_fkey FOREIGN KEY (tenant_id) REFERENCES public.tenants(tenant_id);

--
-- Name: webhook_attempts webhook_attempts_tenant_id_run_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.webhook_attempts
    ADD CONSTRAINT webhook_attempts_tenant_id_run_id_fkey FOREIGN KEY (tenant_id, run_id) REFERENCES public.runs(tenant_id, run_id) ON DELETE CASCADE;

--
-- Name: webhook_endpoints webhook_endpoints_tenant_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.webhook_endpoints
    ADD CONSTRAINT webhook_endpoints_tenant_id_fkey FOREIGN KEY (tenant_id) REFERENCES public.tenants(tenant_id);

--
-- Name: account_changes; Type: ROW SECURITY; Schema: public; Owner: -
--

ALTER TABLE public.account_changes ENABLE ROW LEVEL SECURITY;

--
-- Name: activity_bundles; Type: ROW SECURITY; Schema: public; Owner: -
--

ALTER TABLE public.activity_bundles ENABLE ROW LEVEL SECURITY;

--
-- Name: activity_versions; Type: ROW SECURITY; Schema: public; Owner: -
--

ALTER TABLE public.activity_versions ENABLE ROW LEVEL SECURITY;

--
-- Name: agent_evaluations; Type: ROW SECURITY; Schema: public; Owner: -
--

ALTER TABLE public.agent_evaluations ENABLE ROW LEVEL SECURITY;

--
-- Name: agent_model_snapshot_promotions; Type: ROW SECURITY; Schema: public; Owner: -
--

ALTER TABLE public.agent_model_snapshot_promotions ENABLE ROW LEVEL SECURITY;

--
-- Name: agent_model_snapshots; Type: ROW SECURITY; Schema: public; Owner: -
--

ALTER TABLE public.agent_model_snapshots ENABLE ROW LEVEL SECURITY;

--
-- Name: agent_promotions; Type: ROW SECURITY; Schema: public; Owner: -
--

ALTER TABLE public.agent_promotions ENABLE ROW LEVEL SECURITY;

--
-- Name: agent_test_sets; Type: ROW SECURITY; Schema: public; Owner: -
--

ALTER TABLE public.agent_test_sets ENABLE ROW LEVEL SECURITY;

--
-- Name: agent_version_flags; Type: ROW SECURITY; Schema: public; Owner: -
--

ALTER TABLE public.agent_version_flags ENABLE ROW LEVEL SECURITY;

--
-- Name: agent_versions; Type: ROW SECURITY; Schema: public; Owner: -
--

ALTER TABLE public.agent_versions ENABLE ROW LEVEL SECURITY;

--
-- Name: agents; Type: ROW SECURITY; Schema: public; Owner: -
--

ALTER TABLE public.agents ENABLE ROW LEVEL SECURITY;

--
-- Name: api_keys; Type: ROW SECURITY; Schema: public; Owner: -
--

ALTER TABLE public.api_keys ENABLE ROW LEVEL SECURITY;

--
-- Name: app_sessions; Type: ROW SECURITY; Schema: public; Owner: -
--

ALTER TABLE public.app_sessions ENABLE ROW LEVEL SECURITY;

--
-- Name: approvals; Type: ROW SECURITY; Schema: public; Owner: -
--

ALTER TABLE public.approvals ENABLE ROW LEVEL SECURITY;

--
-- Name: audit_log; Type: ROW SECURITY; Schema: public; Owner: -
--

ALTER TABLE public.audit_log ENABLE ROW LEVEL SECURITY;

--
-- Name: blob_deletions; Type: ROW SECURITY; Schema: public; Owner: -
--

ALTER TABLE public.blob_deletions ENABLE ROW LEVEL SECURITY;

--
-- Name: blob_usage; Type: ROW SECURITY; Schema: public; Owner: -
--

ALTER TABLE public.blob_usage ENABLE ROW LEVEL SECURITY;

--
-- Name: blobs; Type: ROW SECURITY; Schema: public; Owner: -
--

ALTER TABLE public.blobs ENABLE ROW LEVEL SECURITY;

--
-- Name: budget_reservations; Type: ROW SECURITY; Schema: public; Owner: -
--

ALTER TABLE public.budget_reservations ENABLE ROW LEVEL SECURITY;

--
-- Name: cleanup_leases; Type: ROW SECURITY; Schema: public; Owner: -
--

ALTER TABLE public.cleanup_leases ENABLE ROW LEVEL SECURITY;

--
-- Name: console_actions; Type: ROW SECURITY; Schema: public; Owner: -
--

ALTER TABLE public.console_actions ENABLE ROW LEVEL SECURITY;

--
-- Name: endpoint_deliveries; Type: ROW SECURITY; Schema: public; Owner: -
--

ALTER TABLE public.endpoint_deliveries ENABLE ROW LEVEL SECURITY;

--
-- Name: erase_jobs; Type: ROW SECURITY; Schema: public; Owner: -
--

ALTER TABLE public.erase_jobs ENABLE ROW LEVEL SECURITY;

--
-- Name: evaluation_results; Type: ROW SECURITY; Schema: public; Owner: -
--

ALTER TABLE public.evaluation_results ENABLE ROW LEVEL SECURITY;

--
-- Name: evaluation_runs; Type: ROW SECURITY; Schema: public; Owner: -
--

ALTER TABLE public.evaluation_runs ENABLE ROW LEVEL SECURITY;

--
-- Name: exports; Type: ROW SECURITY; Schema: public; Owner: -
--

ALTER TABLE public.exports ENABLE ROW LEVEL SECURITY;

--
-- Name: retention_policies; Type: ROW SECURITY; Schema: public; Owner: -
--

ALTER TABLE public.retention_policies ENABLE ROW LEVEL SECURITY;

--
-- Name: run_event_payloads; Type: ROW SECURITY; Schema: public; Owner: -
--

ALTER TABLE public.run_event_payloads ENABLE ROW LEVEL SECURITY;

--
-- Name: run_event_payloads_p00; Type: ROW SECURITY; Schema: public; Owner: -
--

ALTER TABLE public.run_event_payloads_p00 ENABLE ROW LEVEL SECURITY;

--
-- Name: run_event_payloads_p01; Type: ROW SECURITY; Schema: public; Owner: -
--

ALTER TABLE public.run_event_payloads_p01 ENABLE ROW LEVEL SECURITY;

--
-- Name: run_event_payloads_p02; Type: ROW SECURITY; Schema: public; Owner: -
--

ALTER TABLE public.run_event_payloads_p02 ENABLE ROW LEVEL SECURITY;

--
-- Name: run_event_payloads_p03; Type: ROW SECURITY; Schema: public; Owner: -
--

ALTER TABLE public.run_event_payloads_p03 ENABLE ROW LEVEL SECURITY;

--
-- Name: run_event_payloads_p04; Type: ROW SECURITY; Schema: public; Owner: -
--

ALTER TABLE public.run_event_payloads_p04 ENABLE ROW LEVEL SECURITY;

--
-- Name: run_event_payloads_p05; Type: ROW SECURITY; Schema: public; Owner: -
--

ALTER TABLE public.run_event_payloads_p05 ENABLE ROW LEVEL SECURITY;

--
-- Name: run_event_payloads_p06; Type: ROW SECURITY; Schema: public; Owner: -
--

ALTER TABLE public.run_event_payloads_p06 ENABLE ROW LEVEL SECURITY;

--
-- Name: run_event_payloads_p07; Type: ROW SECURITY; Schema: public; Owner: -
--

ALTER TABLE public.run_event_payloads_p07 ENABLE ROW LEVEL SECURITY;

--
-- Name: run_event_payloads_p08; Type: ROW SECURITY; Schema: public; Owner: -
--

ALTER TABLE public.run_event_payloads_p08 ENABLE ROW LEVEL SECURITY;

--
-- Name: run_event_payloads_p09; Type: ROW SECURITY; Schema: public; Owner: -
--

ALTER TABLE public.run_event_payloads_p09 ENABLE ROW LEVEL SECURITY;

--
-- Name: run_event_payloads_p10; Type: ROW SECURITY; Schema: public; Owner: -
--

ALTER TABLE public.run_event_payloads_p10 ENABLE ROW LEVEL SECURITY;

--
-- Name: run_event_payloads_p11; Type: ROW SECURITY; Schema: public; Owner: -
--

ALTER TABLE public.run_event_payloads_p11 ENABLE ROW LEVEL SECURITY;

--
-- Name: run_event_payloads_p12; Type: ROW SECURITY; Schema: public; Owner: -
--

ALTER TABLE public.run_event_payloads_p12 ENABLE ROW LEVEL SECURITY;

--
-- Name: run_event_payloads_p13; Type: ROW SECURITY; Schema: public; Owner: -
--

ALTER TABLE public.run_event_payloads_p13 ENABLE ROW LEVEL SECURITY;

--
-- Name: run_event_payloads_p14; Type: ROW SECURITY; Schema: public; Owner: -
--

ALTER TABLE public.run_event_payloads_p14 ENABLE ROW LEVEL SECURITY;

--
-- Name: run_event_payloads_p15; Type: ROW SECURITY; Schema: public; Owner: -
--

ALTER TABLE public.run_event_payloads_p15 ENABLE ROW LEVEL SECURITY;

--
-- Name: run_event_payloads_p16; Type: ROW SECURITY; Schema: public; Owner: -
--

ALTER TABLE public.run_event_payloads_p16 ENABLE ROW LEVEL SECURITY;

--
-- Name: run_event_payloads_p17; Type: ROW SECURITY; Schema: public; Owner: -
--

ALTER TABLE public.run_event_payloads_p17 ENABLE ROW LEVEL SECURITY;

--
-- Name: run_event_payloads_p18; Type: ROW SECURITY; Schema: public; Owner: -
--

ALTER TABLE public.run_event_payloads_p18 ENABLE ROW LEVEL SECURITY;

--
-- Name: run_event_payloads_p19; Type: ROW SECURITY; Schema: public; Owner: -
--

ALTER TABLE public.run_event_payloads_p19 ENABLE ROW LEVEL SECURITY;

--
-- Name: run_event_payloads_p20; Type: ROW SECURITY; Schema: public; Owner: -
--

ALTER TABLE public.run_event_payloads_p20 ENABLE ROW LEVEL SECURITY;

--
-- Name: run_event_payloads_p21; Type: ROW SECURITY; Schema: public; Owner: -
--

ALTER TABLE public.run_event_payloads_p21 ENABLE ROW LEVEL SECURITY;

--
-- Name: run_event_payloads_p22; Type: ROW SECURITY; Schema: public; Owner: -
--

ALTER TABLE public.run_event_payloads_p22 ENABLE ROW LEVEL SECURITY;

--
-- Name: run_event_payloads_p23; Type: ROW SECURITY; Schema: public; Owner: -
--

ALTER TABLE public.run_event_payloads_p23 ENABLE ROW LEVEL SECURITY;

--
-- Name: run_event_payloads_p24; Type: ROW SECURITY; Schema: public; Owner: -
--

ALTER TABLE public.run_event_payloads_p24 ENABLE ROW LEVEL SECURITY;

--
-- Name: run_event_payloads_p25; Type: ROW SECURITY; Schema: public; Owner: -
--

ALTER TABLE public.run_event_payloads_p25 ENABLE ROW LEVEL SECURITY;

--
-- Name: run_event_payloads_p26; Type: ROW SECURITY; Schema: public; Owner: -
--

ALTER TABLE public.run_event_payloads_p26 ENABLE ROW LEVEL SECURITY;

--
-- Name: run_event_payloads_p27; Type: ROW SECURITY; Schema: public; Owner: -
--

ALTER TABLE public.run_event_payloads_p27 ENABLE ROW LEVEL SECURITY;

--
-- Name: run_event_payloads_p28; Type: ROW SECURITY; Schema: public; Owner: -
--

ALTER TABLE public.run_event_payloads_p28 ENABLE ROW LEVEL SECURITY;

--
-- Name: run_event_payloads_p29; Type: ROW SECURITY; Schema: public; Owner: -
--

ALTER TABLE public.run_event_payloads_p29 ENABLE ROW LEVEL SECURITY;

--
-- Name: run_event_payloads_p30; Type: ROW SECURITY; Schema: public; Owner: -
--

ALTER TABLE public.run_event_payloads_p30 ENABLE ROW LEVEL SECURITY;

--
-- Name: run_event_payloads_p31; Type: ROW SECURITY; Schema: public; Owner: -
--

ALTER TABLE public.run_event_payloads_p31 ENABLE ROW LEVEL SECURITY;

--
-- Name: run_events; Type: ROW SECURITY; Schema: public; Owner: -
--

ALTER TABLE public.run_events ENABLE ROW LEVEL SECURITY;

--
-- Name: run_events_p00; Type: ROW SECURITY; Schema: public; Owner: -
--

ALTER TABLE public.run_events_p00 ENABLE ROW LEVEL SECURITY;

--
-- Name: run_events_p01; Type: ROW SECURITY; Schema: public; Owner: -
--

ALTER TABLE public.run_events_p01 ENABLE ROW LEVEL SECURITY;

--
-- Name: run_events_p02; Type: ROW SECURITY; Schema: public; Owner: -
--

ALTER TABLE public.run_events_p02 ENABLE ROW LEVEL SECURITY;

--
-- Name: run_events_p03; Type: ROW SECURITY; Schema: public; Owner: -
--

ALTER TABLE public.run_events_p03 ENABLE ROW LEVEL SECURITY;

--
-- Name: run_events_p04; Type: ROW SECURITY; Schema: public; Owner: -
--

ALTER TABLE public.run_events_p04 ENABLE ROW LEVEL SECURITY;

--
-- Name: run_events_p05; Type: ROW SECURITY; Schema: public; Owner: -
--

ALTER TABLE public.run_events_p05 ENABLE ROW LEVEL SECURITY;

--
-- Name: run_events_p06; Type: ROW SECURITY; Schema: public; Owner: -
--

ALTER TABLE public.run_events_p06 ENABLE ROW LEVEL SECURITY;

--
-- Name: run_events_p07; Type: ROW SECURITY; Schema: public; Owner: -
--

ALTER TABLE public.run_events_p07 ENABLE ROW LEVEL SECURITY;

--
-- Name: run_events_p08; Type: ROW SECURITY; Schema: public; Owner: -
--

ALTER TABLE public.run_events_p08 ENABLE ROW LEVEL SECURITY;

--
-- Name: run_events_p09; Type: ROW SECURITY; Schema: public; Owner: -
--

ALTER TABLE public.run_events_p09 ENABLE ROW LEVEL SECURITY;

--
-- Name: run_events_p10; Type: ROW SECURITY; Schema: public; Owner: -
--

ALTER TABLE public.run_events_p10 ENABLE ROW LEVEL SECURITY;

--
-- Name: run_events_p11; Type: ROW SECURITY; Schema: public; Owner: -
--

ALTER TABLE public.run_events_p11 ENABLE ROW LEVEL SECURITY;

--
-- Name: run_events_p12; Type: ROW SECURITY; Schema: public; Owner: -
--

ALTER TABLE public.run_events_p12 ENABLE ROW LEVEL SECURITY;

--
-- Name: run_events_p13; Type: ROW SECURITY; Schema: public; Owner: -
--

ALTER TABLE public.run_events_p13 ENABLE ROW LEVEL SECURITY;

--
-- Name: run_events_p14; Type: ROW SECURITY; Schema: public; Owner: -
--

ALTER TABLE public.run_events_p14 ENABLE ROW LEVEL SECURITY;

--
-- Name: run_events_p15; Type: ROW SECURITY; Schema: public; Owner: -
--

ALTER TABLE public.run_events_p15 ENABLE ROW LEVEL SECURITY;

--
-- Name: run_events_p16; Type: ROW SECURITY; Schema: public; Owner: -
--

ALTER TABLE public.run_events_p16 ENABLE ROW LEVEL SECURITY;

--
-- Name: run_events_p17; Type: ROW SECURITY; Schema: public; Owner: -
--

ALTER TABLE public.run_events_p17 ENABLE ROW LEVEL SECURITY;

--
-- Name: run_events_p18; Type: ROW SECURITY; Schema: public; Owner: -
--

ALTER TABLE public.run_events_p18 ENABLE ROW LEVEL SECURITY;

--
-- Name: run_events_p19; Type: ROW SECURITY; Schema: public; Owner: -
--

ALTER TABLE public.run_events_p19 ENABLE ROW LEVEL SECURITY;

--
-- Name: run_events_p20; Type: ROW SECURITY; Schema: public; Owner: -
--

ALTER TABLE public.run_events_p20 ENABLE ROW LEVEL SECURITY;

--
-- Name: run_events_p21; Type: ROW SECURITY; Schema: public; Owner: -
--

ALTER TABLE public.run_events_p21 ENABLE ROW LEVEL SECURITY;

--
-- Name: run_events_p22; Type: ROW SECURITY; Schema: public; Owner: -
--

ALTER TABLE public.run_events_p22 ENABLE ROW LEVEL SECURITY;

--
-- Name: run_events_p23; Type: ROW SECURITY; Schema: public; Owner: -
--

ALTER TABLE public.run_events_p23 ENABLE ROW LEVEL SECURITY;

--
-- Name: run_events_p24; Type: ROW SECURITY; Schema: public; Owner: -
--

ALTER TABLE public.run_events_p24 ENABLE ROW LEVEL SECURITY;

--
-- Name: run_events_p25; Type: ROW SECURITY; Schema: public; Owner: -
--

ALTER TABLE public.run_events_p25 ENABLE ROW LEVEL SECURITY;

--
-- Name: run_events_p26; Type: ROW SECURITY; Schema: public; Owner: -
--

ALTER TABLE public.run_events_p26 ENABLE ROW LEVEL SECURITY;

--
-- Name: run_events_p27; Type: ROW SECURITY; Schema: public; Owner: -
--

ALTER TABLE public.run_events_p27 ENABLE ROW LEVEL SECURITY;

--
-- Name: run_events_p28; Type: ROW SECURITY; Schema: public; Owner: -
--

ALTER TABLE public.run_events_p28 ENABLE ROW LEVEL SECURITY;

--
-- Name: run_events_p29; Type: ROW SECURITY; Schema: public; Owner: -
--

ALTER TABLE public.run_events_p29 ENABLE ROW LEVEL SECURITY;

--
-- Name: run_events_p30; Type: ROW SECURITY; Schema: public; Owner: -
--

ALTER TABLE public.run_events_p30 ENABLE ROW LEVEL SECURITY;

--
-- Name: run_events_p31; Type: ROW SECURITY; Schema: public; Owner: -
--

ALTER TABLE public.run_events_p31 ENABLE ROW LEVEL SECURITY;

--
-- Name: run_status_totals; Type: ROW SECURITY; Schema: public; Owner: -
--

ALTER TABLE public.run_status_totals ENABLE ROW LEVEL SECURITY;

--
-- Name: runs; Type: ROW SECURITY; Schema: public; Owner: -
--

ALTER TABLE public.runs ENABLE ROW LEVEL SECURITY;

--
-- Name: sandbox_usage_facts; Type: ROW SECURITY; Schema: public; Owner: -
--

ALTER TABLE public.sandbox_usage_facts ENABLE ROW LEVEL SECURITY;

--
-- Name: secrets; Type: ROW SECURITY; Schema: public; Owner: -
--

ALTER TABLE public.secrets ENABLE ROW LEVEL SECURITY;

--
-- Name: sign_in_links; Type: ROW SECURITY; Schema: public; Owner: -
--

ALTER TABLE public.sign_in_links ENABLE ROW LEVEL SECURITY;

--
-- Name: tenant_budget; Type: ROW SECURITY; Schema: public; Owner: -
--

ALTER TABLE public.tenant_budget ENABLE ROW LEVEL SECURITY;

--
-- Name: account_changes tenant_isolation; Type: POLICY; Schema: public; Owner: -
--

CREATE POLICY tenant_isolation ON public.account_changes USING ((tenant_id = public.tenantry_current_tenant()));

--
-- Name: activity_bundles tenant_isolation; Type: POLICY; Schema: public; Owner: -
--

CREATE POLICY tenant_isolation ON public.activity_bundles USING ((tenant_id = public.tenantry_current_tenant()));

--
-- Name: activity_versions tenant_isolation; Type: POLICY; Schema: public; Owner: -
--

CREATE POLICY tenant_isolation ON public.activity_versions USING ((tenant_id = public.tenantry_current_tenant()));

--
-- Name: agent_evaluations tenant_isolation; Type: POLICY; Schema: public; Owner: -
--

CREATE POLICY tenant_isolation ON public.agent_evaluations USING ((tenant_id = public.tenantry_current_tenant()));

--
-- Name: agent_model_snapshot_promotions tenant_isolation; Type: POLICY; Schema: public; Owner: -
--

CREATE POLICY tenant_isolation ON public.agent_model_snapshot_promotions USING ((tenant_id = public.tenantry_current_tenant()));

--
-- Name: agent_model_snapshots tenant_isolation; Type: POLICY; Schema: public; Owner: -
--

CREATE POLICY tenant_isolation ON public.agent_model_snapshots USING ((tenant_id = public.tenantry_current_tenant()));

--
-- Name: agent_promotions tenant_isolation; Type: POLICY; Schema: public; Owner: -
--

CREATE POLICY tenant_isolation ON public.agent_promotions USING ((tenant_id = public.tenantry_current_tenant()));

--
-- Name: agent_test_sets tenant_isolation; Type: POLICY; Schema: public; Owner: -
--

CREATE POLICY tenant_isolation ON public.agent_test_sets USING ((tenant_id = public.tenantry_current_tenant()));

--
-- Name: agent_version_flags tenant_isolation; Type: POLICY; Schema: public; Owner: -
--

CREATE POLICY tenant_isolation ON public.agent_version_flags USING ((tenant_id = public.tenantry_current_tenant()));

--
-- Name: agent_versions tenant_isolation; Type: POLICY; Schema: public; Owner: -
--

CREATE POLICY tenant_isolation ON public.agent_versions USING ((tenant_id = public.tenantry_current_tenant()));

--
-- Name: agents tenant_isolation; Type: POLICY; Schema: public; Owner: -
--

CREATE POLICY tenant_isolation ON public.agents USING ((tenant_id = public.tenantry_current_tenant()));

--
-- Name: api_keys tenant_isolation; Type: POLICY; Schema: public; Owner: -
--

CREATE POLICY tenant_isolation ON public.api_keys USING ((tenant_id = public.tenantry_current_tenant()));

--
-- Name: app_sessions tenant_isolation; Type: POLICY; Schema: public; Owner: -
--

CREATE POLICY tenant_isolation ON public.app_sessions USING ((tenant_id = public.tenantry_current_tenant()));

--
-- Name: approvals tenant_isolation; Type: POLICY; Schema: public; Owner: -
--

CREATE POLICY tenant_isolation ON public.approvals USING ((tenant_id = public.tenantry_current_tenant()));

--
-- Name: audit_log tenant_isolation; Type: POLICY; Schema: public; Owner: -
--

CREATE POLICY tenant_isolation ON public.audit_log USING ((tenant_id = public.tenantry_current_tenant()));

--
-- Name: blob_deletions tenant_isolation; Type: POLICY; Schema: public; Owner: -
--

CREATE POLICY tenant_isolation ON public.blob_deletions USING ((tenant_id = public.tenantry_current_tenant()));

--
-- Name: blob_usage tenant_isolation; Type: POLICY; Schema: public; Owner: -
--

CREATE POLICY tenant_isolation ON public.blob_usage USING ((tenant_id = public.tenantry_current_tenant()));

--
-- Name: blobs tenant_isolation; Type: POLICY; Schema: public; Owner: -
--

CREATE POLICY tenant_isolation ON public.blobs USING ((tenant_id = public.tenantry_current_tenant()));

--
-- Name: budget_reservations tenant_isolation; Type: POLICY; Schema: public; Owner: -
--

CREATE POLICY tenant_isolation ON public.budget_reservations USING ((tenant_id = public.tenantry_current_tenant()));

--
-- Name: cleanup_leases tenant_isolation; Type: POLICY; Schema: public; Owner: -
--

CREATE POLICY tenant_isolation ON public.cleanup_leases USING ((tenant_id = public.tenantry_current_tenant()));

--
-- Name: console_actions tenant_isolation; Type: POLICY; Schema: public; Owner: -
--

CREATE POLICY tenant_isolation ON public.console_actions USING ((tenant_id = public.tenantry_current_tenant()));

--
-- Name: endpoint_deliveries tenant_isolation; Type: POLICY; Schema: public; Owner: -
--

CREATE POLICY tenant_isolation ON public.endpoint_deliveries USING ((tenant_id = public.tenantry_current_tenant()));

--
-- Name: erase_jobs tenant_isolation; Type: POLICY; Schema: public; Owner: -
--

CREATE POLICY tenant_isolation ON public.erase_jobs USING ((tenant_id = public.tenantry_current_tenant()));

--
-- Name: evaluation_results tenant_isolation; Type: POLICY; Schema: public; Owner: -
--

CREATE POLICY tenant_isolation ON public.evaluation_results USING ((tenant_id = public.tenantry_current_tenant()));

--
-- Name: evaluation_runs tenant_isolation; Type: POLICY; Schema: public; Owner: -
--

CREATE POLICY tenant_isolation ON public.evaluation_runs USING ((tenant_id = public.tenantry_current_tenant()));

--
-- Name: exports tenant_isolation; Type: POLICY; Schema: public; Owner: -
--

CREATE POLICY tenant_isolation ON public.exports USING ((tenant_id = public.tenantry_current_tenant()));

--
-- Name: retention_policies tenant_isolation; Type: POLICY; Schema: public; Owner: -
--

CREATE POLICY tenant_isolation ON public.retention_policies USING ((tenant_id = public.tenantry_current_tenant()));

--
-- Name: run_event_payloads tenant_isolation; Type: POLICY; Schema: public; Owner: -
--

CREATE POLICY tenant_isolation ON public.run_event_payloads USING ((tenant_id = public.tenantry_current_tenant()));

--
-- Name: run_event_payloads_p00 tenant_isolation; Type: POLICY; Schema: public; Owner: -
--

CREATE POLICY tenant_isolation ON public.run_event_payloads_p00 USING ((tenant_id = public.tenantry_current_tenant()));

--
-- Name: run_event_payloads_p01 tenant_isolation; Type: POLICY; Schema: public; Owner: -
--

CREATE POLICY tenant_isolation ON public.run_event_payloads_p01 USING ((tenant_id = public.tenantry_current_tenant()));

--
-- Name: run_event_payloads_p02 tenant_isolation; Type: POLICY; Schema: public; Owner: -
--

CREATE POLICY tenant_isolation ON public.run_event_payloads_p02 USING ((tenant_id = public.tenantry_current_tenant()));

--
-- Name: run_event_payloads_p03 tenant_isolation; Type: POLICY; Schema: public; Owner: -
--

CREATE POLICY tenant_isolation ON public.run_event_payloads_p03 USING ((tenant_id = public.tenantry_current_tenant()));

--
-- Name: run_event_payloads_p04 tenant_isolation; Type: POLICY; Schema: public; Owner: -
--

CREATE POLICY tenant_isolation ON public.run_event_payloads_p04 USING ((tenant_id = public.tenantry_current_tenant()));

--
-- Name: run_event_payloads_p05 tenant_isolation; Type: POLICY; Schema: public; Owner: -
--

CREATE POLICY tenant_isolation ON public.run_event_payloads_p05 USING ((tenant_id = public.tenantry_current_tenant()));

--
-- Name: run_event_payloads_p06 tenant_isolation; Type: POLICY; Schema: public; Owner: -
--

CREATE POLICY tenant_isolation ON public.run_event_payloads_p06 USING ((tenant_id = public.tenantry_current_tenant()));

--
-- Name: run_event_payloads_p07 tenant_isolation; Type: POLICY; Schema: public; Owner: -
--

CREATE POLICY tenant_isolation ON public.run_event_payloads_p07 USING ((tenant_id = public.tenantry_current_tenant()));

--
-- Name: run_event_payloads_p08 tenant_isolation; Type: POLICY; Schema: public; Owner: -
--

CREATE POLICY tenant_isolation ON public.run_event_payloads_p08 USING ((tenant_id = public.tenantry_current_tenant()));

--
-- Name: run_event_payloads_p09 tenant_isolation; Type: POLICY; Schema: public; Owner: -
--

CREATE POLICY tenant_isolation ON public.run_event_payloads_p09 USING ((tenant_id = public.tenantry_current_tenant()));

--
-- Name: run_event_payloads_p10 tenant_isolation; Type: POLICY; Schema: public; Owner: -
--

CREATE POLICY tenant_isolation ON public.run_event_payloads_p10 USING ((tenant_id = public.tenantry_current_tenant()));

--
-- Name: run_event_payloads_p11 tenant_isolation; Type: POLICY; Schema: public; Owner: -
--

CREATE POLICY tenant_isolation ON public.run_event_payloads_p11 USING ((tenant_id = public.tenantry_current_tenant()));

--
-- Name: run_event_payloads_p12 tenant_isolation; Type: POLICY; Schema: public; Owner: -
--

CREATE POLICY tenant_isolation ON public.run_event_payloads_p12 USING ((tenant_id = public.tenantry_current_tenant()));

--
-- Name: run_event_payloads_p13 tenant_isolation; Type: POLICY; Schema: public; Owner: -
--

CREATE POLICY tenant_isolation ON public.run_event_payloads_p13 USING ((tenant_id = public.tenantry_current_tenant()));

--
-- Name: run_event_payloads_p14 tenant_isolation; Type: POLICY; Schema: public; Owner: -
--

CREATE POLICY tenant_isolation ON public.run_event_payloads_p14 USING ((tenant_id = public.tenantry_current_tenant()));

--
-- Name: run_event_payloads_p15 tenant_isolation; Type: POLICY; Schema: public; Owner: -
--

CREATE POLICY tenant_isolation ON public.run_event_payloads_p15 USING ((tenant_id = public.tenantry_current_tenant()));

--
-- Name: run_event_payloads_p16 tenant_isolation; Type: POLICY; Schema: public; Owner: -
--

CREATE POLICY tenant_isolation ON public.run_event_payloads_p16 USING ((tenant_id = public.tenantry_current_tenant()));

--
-- Name: run_event_payloads_p17 tenant_isolation; Type: POLICY; Schema: public; Owner: -
--

CREATE POLICY tenant_isolation ON public.run_event_payloads_p17 USING ((tenant_id = public.tenantry_current_tenant()));

--
-- Name: run_event_payloads_p18 tenant_isolation; Type: POLICY; Schema: public; Owner: -
--

CREATE POLICY tenant_isolation ON public.run_event_payloads_p18 USING ((tenant_id = public.tenantry_current_tenant()));

--
-- Name: run_event_payloads_p19 tenant_isolation; Type: POLICY; Schema: public; Owner: -
--

CREATE POLICY tenant_isolation ON public.run_event_payloads_p19 USING ((tenant_id = public.tenantry_current_tenant()));

--
-- Name: run_event_payloads_p20 tenant_isolation; Type: POLICY; Schema: public; Owner: -
--

CREATE POLICY tenant_isolation ON public.run_event_payloads_p20 USING ((tenant_id = public.tenantry_current_tenant()));

--
-- Name: run_event_payloads_p21 tenant_isolation; Type: POLICY; Schema: public; Owner: -
--

CREATE POLICY tenant_isolation ON public.run_event_payloads_p21 USING ((tenant_id = public.tenantry_current_tenant()));

--
-- Name: run_event_payloads_p22 tenant_isolation; Type: POLICY; Schema: public; Owner: -
--

CREATE POLICY tenant_isolation ON public.run_event_payloads_p22 USING ((tenant_id = public.tenantry_current_tenant()));

--
-- Name: run_event_payloads_p23 tenant_isolation; Type: POLICY; Schema: public; Owner: -
--

CREATE POLICY tenant_isolation ON public.run_event_payloads_p23 USING ((tenant_id = public.tenantry_current_tenant()));

--
-- Name: run_event_payloads_p24 tenant_isolation; Type: POLICY; Schema: public; Owner: -
--

CREATE POLICY tenant_isolation ON public.run_event_payloads_p24 USING ((tenant_id = public.tenantry_current_tenant()));

--
-- Name: run_event_payloads_p25 tenant_isolation; Type: POLICY; Schema: public; Owner: -
--

CREATE POLICY tenant_isolation ON public.run_event_payloads_p25 USING ((tenant_id = public.tenantry_current_tenant()));

--
-- Name: run_event_payloads_p26 tenant_isolation; Type: POLICY; Schema: public; Owner: -
--

CREATE POLICY tenant_isolation ON public.run_event_payloads_p26 USING ((tenant_id = public.tenantry_current_tenant()));

--
-- Name: run_event_payloads_p27 tenant_isolation; Type: POLICY; Schema: public; Owner: -
--

CREATE POLICY tenant_isolation ON public.run_event_payloads_p27 USING ((tenant_id = public.tenantry_current_tenant()));

--
-- Name: run_event_payloads_p28 tenant_isolation; Type: POLICY; Schema: public; Owner: -
--

CREATE POLICY tenant_isolation ON public.run_event_payloads_p28 USING ((tenant_id = public.tenantry_current_tenant()));

--
-- Name: run_event_payloads_p29 tenant_isolation; Type: POLICY; Schema: public; Owner: -
--

CREATE POLICY tenant_isolation ON public.run_event_payloads_p29 USING ((tenant_id = public.tenantry_current_tenant()));

--
-- Name: run_event_payloads_p30 tenant_isolation; Type: POLICY; Schema: public; Owner: -
--

CREATE POLICY tenant_isolation ON public.run_event_payloads_p30 USING ((tenant_id = public.tenantry_current_tenant()));

--
-- Name: run_event_payloads_p31 tenant_isolation; Type: POLICY; Schema: public; Owner: -
--

CREATE POLICY tenant_isolation ON public.run_event_payloads_p31 USING ((tenant_id = public.tenantry_current_tenant()));

--
-- Name: run_events tenant_isolation; Type: POLICY; Schema: public; Owner: -
--

CREATE POLICY tenant_isolation ON public.run_events USING ((tenant_id = public.tenantry_current_tenant()));

--
-- Name: run_events_p00 tenant_isolation; Type: POLICY; Schema: public; Owner: -
--

CREATE POLICY tenant_isolation ON public.run_events_p00 USING ((tenant_id = public.tenantry_current_tenant()));

--
-- Name: run_events_p01 tenant_isolation; Type: POLICY; Schema: public; Owner: -
--

CREATE POLICY tenant_isolation ON public.run_events_p01 USING ((tenant_id = public.tenantry_current_tenant()));

--
-- Name: run_events_p02 tenant_isolation; Type: POLICY; Schema: public; Owner: -
--

CREATE POLICY tenant_isolation ON public.run_events_p02 USING ((tenant_id = public.tenantry_current_tenant()));

--
-- Name: run_events_p03 tenant_isolation; Type: POLICY; Schema: public; Owner: -
--

CREATE POLICY tenant_isolation ON public.run_events_p03 USING ((tenant_id = public.tenantry_current_tenant()));

--
-- Name: run_events_p04 tenant_isolation; Type: POLICY; Schema: public; Owner: -
--

CREATE POLICY tenant_isolation ON public.run_events_p04 USING ((tenant_id = public.tenantry_current_tenant()));

--
-- Name: run_events_p05 tenant_isolation; Type: POLICY; Schema: public; Owner: -
--

CREATE POLICY tenant_isolation ON public.run_events_p05 USING ((tenant_id = public.tenantry_current_tenant()));

--
-- Name: run_events_p06 tenant_isolation; Type: POLICY; Schema: public; Owner: -
--

CREATE POLICY tenant_isolation ON public.run_events_p06 USING ((tenant_id = public.tenantry_current_tenant()));

--
-- Name: run_events_p07 tenant_isolation; Type: POLICY; Schema: public; Owner: -
--

CREATE POLICY tenant_isolation ON public.run_events_p07 USING ((tenant_id = public.tenantry_current_tenant()));

--
-- Name: run_events_p08 tenant_isolation; Type: POLICY; Schema: public; Owner: -
--

CREATE POLICY tenant_isolation ON public.run_events_p08 USING ((tenant_id = public.tenantry_current_tenant()));

--
-- Name: run_events_p09 tenant_isolation; Type: POLICY; Schema: public; Owner: -
--

CREATE POLICY tenant_isolation ON public.run_events_p09 USING ((tenant_id = public.tenantry_current_tenant()));

--
-- Name: run_events_p10 tenant_isolation; Type: POLICY; Schema: public; Owner: -
--

CREATE POLICY tenant_isolation ON public.run_events_p10 USING ((tenant_id = public.tenantry_current_tenant()));

--
-- Name: run_events_p11 tenant_isolation; Type: POLICY; Schema: public; Owner: -
--

CREATE POLICY tenant_isolation ON public.run_events_p11 USING ((tenant_id = public.tenantry_current_tenant()));

--
-- Name: run_events_p12 tenant_isolation; Type: POLICY; Schema: public; Owner: -
--

CREATE POLICY tenant_isolation ON public.run_events_p12 USING ((tenant_id = public.tenantry_current_tenant()));

--
-- Name: run_events_p13 tenant_isolation; Type: POLICY; Schema: public; Owner: -
--

CREATE POLICY tenant_isolation ON public.run_events_p13 USING ((tenant_id = public.tenantry_current_tenant()));

--
-- Name: run_events_p14 tenant_isolation; Type: POLICY; Schema: public; Owner: -
--

CREATE POLICY tenant_isolation ON public.run_events_p14 USING ((tenant_id = public.tenantry_current_tenant()));

--
-- Name: run_events_p15 tenant_isolation; Type: POLICY; Schema: public; Owner: -
--

CREATE POLICY tenant_isolation ON public.run_events_p15 USING ((tenant_id = public.tenantry_current_tenant()));

--
-- Name: run_events_p16 tenant_isolation; Type: POLICY; Schema: public; Owner: -
--

CREATE POLICY tenant_isolation ON public.run_events_p16 USING ((tenant_id = public.tenantry_current_tenant()));

--
-- Name: run_events_p17 tenant_isolation; Type: POLICY; Schema: public; Owner: -
--

CREATE POLICY tenant_isolation ON public.run_events_p17 USING ((tenant_id = public.tenantry_current_tenant()));

--
-- Name: run_events_p18 tenant_isolation; Type: POLICY; Schema: public; Owner: -
--

CREATE POLICY tenant_isolation ON public.run_events_p18 USING ((tenant_id = public.tenantry_current_tenant()));

--
-- Name: run_events_p19 tenant_isolation; Type: POLICY; Schema: public; Owner: -
--

CREATE POLICY tenant_isolation ON public.run_events_p19 USING ((tenant_id = public.tenantry_current_tenant()));

--
-- Name: run_events_p20 tenant_isolation; Type: POLICY; Schema: public; Owner: -
--

CREATE POLICY tenant_isolation ON public.run_events_p20 USING ((tenant_id = public.tenantry_current_tenant()));

--
-- Name: run_events_p21 tenant_isolation; Type: POLICY; Schema: public; Owner: -
--

CREATE POLICY tenant_isolation ON public.run_events_p21 USING ((tenant_id = public.tenantry_current_tenant()));

--
-- Name: run_events_p22 tenant_isolation; Type: POLICY; Schema: public; Owner: -
--

CREATE POLICY tenant_isolation ON public.run_events_p22 USING ((tenant_id = public.tenantry_current_tenant()));

--
-- Name: run_events_p23 tenant_isolation; Type: POLICY; Schema: public; Owner: -
--

CREATE POLICY tenant_isolation ON public.run_events_p23 USING ((tenant_id = public.tenantry_current_tenant()));

--
-- Name: run_events_p24 tenant_isolation; Type: POLICY; Schema: public; Owner: -
--

CREATE POLICY tenant_isolation ON public.run_events_p24 USING ((tenant_id = public.tenantry_current_tenant()));

--
-- Name: run_events_p25 tenant_isolation; Type: POLICY; Schema: public; Owner: -
--

CREATE POLICY tenant_isolation ON public.run_events_p25 USING ((tenant_id = public.tenantry_current_tenant()));

--
-- Name: run_events_p26 tenant_isolation; Type: POLICY; Schema: public; Owner: -
--

CREATE POLICY tenant_isolation ON public.run_events_p26 USING ((tenant_id = public.tenantry_current_tenant()));

--
-- Name: run_events_p27 tenant_isolation; Type: POLICY; Schema: public; Owner: -
--

CREATE POLICY tenant_isolation ON public.run_events_p27 USING ((tenant_id = public.tenantry_current_tenant()));

--
-- Name: run_events_p28 tenant_isolation; Type: POLICY; Schema: public; Owner: -
--

CREATE POLICY tenant_isolation ON public.run_events_p28 USING ((tenant_id = public.tenantry_current_tenant()));

--
-- Name: run_events_p29 tenant_isolation; Type: POLICY; Schema: public; Owner: -
--

CREATE POLICY tenant_isolation ON public.run_events_p29 USING ((tenant_id = public.tenantry_current_tenant()));

--
-- Name: run_events_p30 tenant_isolation; Type: POLICY; Schema: public; Owner: -
--

CREATE POLICY tenant_isolation ON public.run_events_p30 USING ((tenant_id = public.tenantry_current_tenant()));

--
-- Name: run_events_p31 tenant_isolation; Type: POLICY; Schema: public; Owner: -
--

CREATE POLICY tenant_isolation ON public.run_events_p31 USING ((tenant_id = public.tenantry_current_tenant()));

--
-- Name: run_status_totals tenant_isolation; Type: POLICY; Schema: public; Owner: -
--

CREATE POLICY tenant_isolation ON public.run_status_totals USING ((tenant_id = public.tenantry_current_tenant()));

--
-- Name: runs tenant_isolation; Type: POLICY; Schema: public; Owner: -
--

CREATE POLICY tenant_isolation ON public.runs USING ((tenant_id = public.tenantry_current_tenant()));

--
-- Name: sandbox_usage_facts tenant_isolation; Type: POLICY; Schema: public; Owner: -
--

CREATE POLICY tenant_isolation ON public.sandbox_usage_facts USING ((tenant_id = public.tenantry_current_tenant()));

--
-- Name: secrets tenant_isolation; Type: POLICY; Schema: public; Owner: -
--

CREATE POLICY tenant_isolation ON public.secrets USING ((tenant_id = public.tenantry_current_tenant()));

--
-- Name: sign_in_links tenant_isolation; Type: POLICY; Schema: public; Owner: -
--

CREATE POLICY tenant_isolation ON public.sign_in_links USING ((tenant_id = public.tenantry_current_tenant()));

--
-- Name: tenant_budget tenant_isolation; Type: POLICY; Schema: public; Owner: -
--

CREATE POLICY tenant_isolation ON public.tenant_budget USING ((tenant_id = public.tenantry_current_tenant()));

--
-- Name: tenant_keys tenant_isolation; Type: POLICY; Schema: public; Owner: -
--

CREATE POLICY tenant_isolation ON public.tenant_keys USING ((tenant_id = public.tenantry_current_tenant()));

--
-- Name: tenant_load tenant_isolation; Type: POLICY; Schema: public; Owner: -
--

CREATE POLICY tenant_isolation ON public.tenant_load USING ((tenant_id = public.tenantry_current_tenant()));

--
-- Name: tenant_policies tenant_isolation; Type: POLICY; Schema: public; Owner: -
--

CREATE POLICY tenant_isolation ON public.tenant_policies USING ((tenant_id = public.tenantry_current_tenant()));

--
-- Name: tenant_users tenant_isolation; Type: POLICY; Schema: public; Owner: -
--

CREATE POLICY tenant_isolation ON public.tenant_users USING ((tenant_id = public.tenantry_current_tenant()));

--
-- Name: tenants tenant_isolation; Type: POLICY; Schema: public; Owner: -
--

CREATE POLICY tenant_isolation ON public.tenants USING ((tenant_id = public.tenantry_current_tenant()));

--
-- Name: test_case_sources tenant_isolation; Type: POLICY; Schema: public; Owner: -
--

CREATE POLICY tenant_isolation ON public.test_case_sources USING ((tenant_id = public.tenantry_current_tenant()));

--
-- Name: tombstones tenant_isolation; Type: POLICY; Schema: public; Owner: -
--

CREATE POLICY tenant_isolation ON public.tombstones USING ((tenant_id = public.tenantry_current_tenant()));

--
-- Name: tool_server_oauth tenant_isolation; Type: POLICY; Schema: public; Owner: -
--

CREATE POLICY tenant_isolation ON public.tool_server_oauth USING ((tenant_id = public.tenantry_current_tenant()));

--
-- Name: tool_servers tenant_isolation; Type: POLICY; Schema: public; Owner: -
--

CREATE POLICY tenant_isolation ON public.tool_servers USING ((tenant_id = public.tenantry_current_tenant()));

--
-- Name: usage_facts tenant_isolation; Type: POLICY; Schema: public; Owner: -
--

CREATE POLICY tenant_isolation ON public.usage_facts USING ((tenant_id = public.tenantry_current_tenant()));

--
-- Name: webhook_attempts tenant_isolation; Type: POLICY; Schema: public; Owner: -
--

CREATE POLICY tenant_isolation ON public.webhook_attempts USING ((tenant_id = public.tenantry_current_tenant()));

--
-- Name: webhook_endpoints tenant_isolation; Type: POLICY; Schema: public; Owner: -
--

CREATE POLICY tenant_isolation ON public.webhook_endpoints USING ((tenant_id = public.tenantry_current_tenant()));

--
-- Name: tenant_keys; Type: ROW SECURITY; Schema: public; Owner: -
--

ALTER TABLE public.tenant_keys ENABLE ROW LEVEL SECURITY;

--
-- Name: tenant_load; Type: ROW SECURITY; Schema: public; Owner: -
--

ALTER TABLE public.tenant_load ENABLE ROW LEVEL SECURITY;

--
-- Name: tenant_policies; Type: ROW SECURITY; Schema: public; Owner: -
--

ALTER TABLE public.tenant_policies ENABLE ROW LEVEL SECURITY;

--
-- Name: tenant_users; Type: ROW SECURITY; Schema: public; Owner: -
--

ALTER TABLE public.tenant_users ENABLE ROW LEVEL SECURITY;

--
-- Name: tenants; Type: ROW SECURITY; Schema: public; Owner: -
--

ALTER TABLE public.tenants ENABLE ROW LEVEL SECURITY;

--
-- Name: test_case_sources; Type: ROW SECURITY; Schema: public; Owner: -
--

ALTER TABLE public.test_case_sources ENABLE ROW LEVEL SECURITY;

--
-- Name: tombstones; Type: ROW SECURITY; Schema: public; Owner: -
--

ALTER TABLE public.tombstones ENABLE ROW LEVEL SECURITY;

--
-- Name: tool_server_oauth; Type: ROW SECURITY; Schema: public; Owner: -
--

ALTER TABLE public.tool_server_oauth ENABLE ROW LEVEL SECURITY;

--
-- Name: tool_servers; Type: ROW SECURITY; Schema: public; Owner: -
--

ALTER TABLE public.tool_servers ENABLE ROW LEVEL SECURITY;

--
-- Name: usage_facts; Type: ROW SECURITY; Schema: public; Owner: -
--

ALTER TABLE public.usage_facts ENABLE ROW LEVEL SECURITY;

--
-- Name: webhook_attempts; Type: ROW SECURITY; Schema: public; Owner: -
--

ALTER TABLE public.webhook_attempts ENABLE ROW LEVEL SECURITY;

--
-- Name: webhook_endpoints; Type: ROW SECURITY; Schema: public; Owner: -
--

ALTER TABLE public.webhook_endpoints ENABLE ROW LEVEL SECURITY;

--
-- PostgreSQL database dump complete
--
