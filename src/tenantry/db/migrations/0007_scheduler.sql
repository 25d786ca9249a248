-- Fair scheduling, admission and the budget ledger (DESIGN §7; invariants 8-10).

-- A tenant's policy: its share when slots are contended, its hard ceilings, its budgets.
-- Every tenant has one (created with the tenant; defaults until an operator sets it).
CREATE TABLE tenant_policies (
    tenant_id                   text PRIMARY KEY REFERENCES tenants (tenant_id),
    weight                      integer NOT NULL DEFAULT 1 CHECK (weight BETWEEN 1 AND 1000),
    max_running                 integer NOT NULL DEFAULT 100
                                    CHECK (max_running BETWEEN 1 AND 100000),
    max_queued                  integer NOT NULL DEFAULT 10000
                                    CHECK (max_queued BETWEEN 1 AND 10000000),
    tokens_per_minute           bigint CHECK (tokens_per_minute > 0),
    monthly_spend_cap_micros    bigint CHECK (monthly_spend_cap_micros >= 0),
    updated_at                  timestamptz NOT NULL DEFAULT now()
);

-- What a tenant holds now, kept by triggers in the same transaction as each change, so
-- admission and the claim read one row instead of counting runs.
CREATE TABLE tenant_load (
    tenant_id       text PRIMARY KEY REFERENCES tenants (tenant_id),
    queued          integer NOT NULL DEFAULT 0 CHECK (queued >= 0),
    running         integer NOT NULL DEFAULT 0 CHECK (running >= 0),
    waiting         integer NOT NULL DEFAULT 0 CHECK (waiting >= 0),
    last_claim_at   timestamptz
);

-- The tenant's token bucket and this month's spend: durable, so every worker and API
-- replica sees one level. A row of its own, so the reservations and settlements of model
-- calls do not queue behind the status changes and claims locking tenant_load.
CREATE TABLE tenant_budget (
    tenant_id       text PRIMARY KEY REFERENCES tenants (tenant_id),
    bucket_tokens   double precision,          -- NULL: full
    bucket_at       timestamptz NOT NULL DEFAULT now(),
    spend_month     date NOT NULL DEFAULT date_trunc('month', now())::date,
    spent_micros    bigint NOT NULL DEFAULT 0,
    reserved_micros bigint NOT NULL DEFAULT 0
);

INSERT INTO tenant_policies (tenant_id) SELECT tenant_id FROM tenants;
INSERT INTO tenant_budget (tenant_id) SELECT tenant_id FROM tenants;
INSERT INTO tenant_load (tenant_id, queued, running, waiting)
SELECT t.tenant_id,
       count(r.run_id) FILTER (WHERE r.status = 'queued'),
       count(r.run_id) FILTER (WHERE r.status = 'running'),
       count(r.run_id) FILTER (WHERE r.status = 'waiting')
FROM tenants t LEFT JOIN runs r ON r.tenant_id = t.tenant_id
GROUP BY t.tenant_id;

CREATE FUNCTION tenantry_new_tenant() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public AS $$
BEGIN
    INSERT INTO public.tenant_policies (tenant_id) VALUES (NEW.tenant_id);
    INSERT INTO public.tenant_load (tenant_id) VALUES (NEW.tenant_id);
    INSERT INTO public.tenant_budget (tenant_id) VALUES (NEW.tenant_id);
    RETURN NULL;
END
$$;
CREATE TRIGGER tenants_policy AFTER INSERT ON tenants
    FOR EACH ROW EXECUTE FUNCTION tenantry_new_tenant();

-- The counters follow every status change of every run, in its transaction.
CREATE FUNCTION tenantry_count_runs() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public AS $$
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
CREATE TRIGGER runs_count AFTER INSERT OR UPDATE OF status ON runs
    FOR EACH ROW EXECUTE FUNCTION tenantry_count_runs();

-- When a run first left the queue: its queue wait is started_at - created_at.
ALTER TABLE runs ADD COLUMN started_at timestamptz;
-- 'agent': driven by the platform's workers; 'task': a library user's task (tenantry.store),
-- claimed by that user's own loop. Both count against the same tenant policy.
ALTER TABLE runs ADD COLUMN kind text NOT NULL DEFAULT 'agent' CHECK (kind IN ('agent', 'task'));

-- The claim picks a tenant, then that tenant's next run: in-flight runs (steps already
-- taken) before new ones, interactive before batch, oldest first.
CREATE INDEX runs_queued_by_tenant ON runs
    (tenant_id, kind, (steps = 0), (priority <> 'interactive'), created_at)
    WHERE status = 'queued';

-- A tenant's token bucket level now, refilled at tokens_per_minute (NULL: no bucket).
CREATE FUNCTION tenantry_bucket_level(b tenant_budget, p tenant_policies)
RETURNS double precision
LANGUAGE sql STABLE SET search_path = pg_catalog, public AS $$
    SELECT CASE WHEN p.tokens_per_minute IS NULL THEN NULL ELSE
        least(p.tokens_per_minute::float8,
              coalesce(b.bucket_tokens, p.tokens_per_minute::float8)
              + extract(epoch FROM now() - b.bucket_at) * p.tokens_per_minute / 60.0)
    END
$$;

-- This month's spend including reservations (a new month starts at zero).
CREATE FUNCTION tenantry_month_spend(b tenant_budget) RETURNS bigint
LANGUAGE sql STABLE SET search_path = pg_catalog, public AS $$
    SELECT CASE WHEN b.spend_month < date_trunc('month', now())::date THEN b.reserved_micros
                ELSE b.spent_micros + b.reserved_micros END
$$;

-- May a slot go to this tenant now? Queued work, under its running ceiling, tokens in its
-- bucket, spend under its cap.
CREATE FUNCTION tenantry_may_claim(l tenant_load, p tenant_policies, b tenant_budget)
RETURNS boolean
LANGUAGE sql STABLE SET search_path = pg_catalog, public AS $$
    SELECT l.queued > 0 AND l.running < p.max_running
       AND (p.tokens_per_minute IS NULL OR public.tenantry_bucket_level(b, p) > 0)
       AND (p.monthly_spend_cap_micros IS NULL
            OR public.tenantry_month_spend(b) < p.monthly_spend_cap_micros)
$$;

-- The fair claim. Expired leases first (those runs were in flight and count as running
-- already); then, one run at a time, the tenant using the smallest share of its weight
-- (running / weight; ties: the one served longest ago) among tenants with queued work,
-- under max_running, with tokens in their bucket and spend under their cap. The tenant's
-- load row is locked, so concurrent claimers never push one past max_running (the first
-- pick waits for a row another claimer holds; later picks skip it, so claimers never wait
-- for each other in a cycle); runs are locked SKIP LOCKED, so none is claimed twice.
-- Nothing is held after the transaction: no lock spans a model call.
DROP FUNCTION tenantry_claim_runs(text, integer, double precision);
CREATE FUNCTION tenantry_claim_runs(p_worker text, p_batch integer,
                                    p_lease_seconds double precision,
                                    p_kind text DEFAULT 'agent')
RETURNS TABLE (tenant_id text, run_id uuid, lease_epoch bigint)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, public AS $$
DECLARE
    v_claimed integer;
    v_tenant text;
    v_run uuid;
    v_skip text[] := '{}';
    v_holding boolean := false;
BEGIN
    RETURN QUERY
    WITH expired AS (
        SELECT r.tenant_id, r.run_id FROM public.runs r
        WHERE r.status = 'running' AND r.lease_expires_at < now() AND r.kind = p_kind
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
        IF v_holding THEN
            -- Holding a tenant row already: never wait for another (two claimers waiting
            -- for each other's rows would deadlock); one being claimed for is skipped.
            SELECT l.tenant_id INTO v_tenant
            FROM public.tenant_load l
            JOIN public.tenant_policies p ON p.tenant_id = l.tenant_id
            JOIN public.tenant_budget b ON b.tenant_id = l.tenant_id
            WHERE public.tenantry_may_claim(l, p, b) AND l.tenant_id <> ALL (v_skip)
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
            ORDER BY l.running::float8 / p.weight, l.last_claim_at NULLS FIRST, l.tenant_id
            LIMIT 1
            FOR UPDATE OF l;
        END IF;
        EXIT WHEN v_tenant IS NULL;
        v_holding := true;

        SELECT r.run_id INTO v_run FROM public.runs r
        WHERE r.tenant_id = v_tenant AND r.kind = p_kind AND r.status = 'queued'
          AND (r.available_at IS NULL OR r.available_at <= now())
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
        RETURNING r.tenant_id, r.run_id, r.lease_epoch;
        UPDATE public.tenant_load SET last_claim_at = clock_timestamp()
        WHERE tenant_load.tenant_id = v_tenant;
        v_claimed := v_claimed + 1;
        v_tenant := NULL;
        v_run := NULL;
    END LOOP;
END
$$;
REVOKE ALL ON FUNCTION tenantry_claim_runs(text, integer, double precision, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION tenantry_claim_runs(text, integer, double precision, text)
    TO tenantry_app;

-- The old order — oldest queued run of any tenant — kept as a baseline for the fairness
-- benchmark (TENANTRY_CLAIM_ORDER=fifo). It ignores every policy: never for production.
CREATE FUNCTION tenantry_claim_runs_fifo(p_worker text, p_batch integer,
                                         p_lease_seconds double precision)
RETURNS TABLE (tenant_id text, run_id uuid, lease_epoch bigint)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, public AS $$
DECLARE
    v_tenants text[];
BEGIN
    CREATE TEMP TABLE IF NOT EXISTS fifo_picked (tenant_id text, run_id uuid, expired boolean)
        ON COMMIT DROP;
    INSERT INTO fifo_picked
    SELECT r.tenant_id, r.run_id, true FROM public.runs r
    WHERE r.status = 'running' AND r.lease_expires_at < now() AND r.kind = 'agent'
    ORDER BY r.lease_expires_at LIMIT p_batch
    FOR UPDATE SKIP LOCKED;
    INSERT INTO fifo_picked
    SELECT r.tenant_id, r.run_id, false FROM public.runs r
    WHERE r.status = 'queued' AND r.kind = 'agent'
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
REVOKE ALL ON FUNCTION tenantry_claim_runs_fifo(text, integer, double precision) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION tenantry_claim_runs_fifo(text, integer, double precision)
    TO tenantry_app;

-- The budget ledger. A reservation is taken before each model call under the run's lease
-- epoch, and settled (to the provider-reported usage) in the transaction that appends the
-- reply, or released when the call is abandoned, or forfeited by the sweeper when its
-- owner lost the lease. Every change checks the epoch: a stale owner can do none of them.
CREATE TABLE budget_reservations (
    tenant_id       text NOT NULL REFERENCES tenants (tenant_id),
    reservation_id  uuid NOT NULL,
    run_id          uuid NOT NULL,
    lease_epoch     bigint NOT NULL,
    tokens          bigint NOT NULL CHECK (tokens >= 0),
    cost_micros     bigint NOT NULL CHECK (cost_micros >= 0),
    status          text NOT NULL DEFAULT 'reserved'
                        CHECK (status IN ('reserved', 'settled', 'released', 'forfeited')),
    created_at      timestamptz NOT NULL DEFAULT now(),
    closed_at       timestamptz,
    PRIMARY KEY (tenant_id, reservation_id),
    FOREIGN KEY (tenant_id, run_id) REFERENCES runs (tenant_id, run_id)
);
CREATE INDEX budget_reservations_open ON budget_reservations (created_at)
    WHERE status = 'reserved';

-- The billing record: one immutable row per model reply, with the usage the provider
-- reported and its price. Run totals, tenant spend and /v1/usage are projections of it.
CREATE TABLE usage_facts (
    tenant_id                   text NOT NULL REFERENCES tenants (tenant_id),
    run_id                      uuid NOT NULL,
    seq                         integer NOT NULL,  -- the ModelReplied it records
    agent_id                    uuid NOT NULL,
    agent_version               integer NOT NULL,
    provider                    text NOT NULL,
    account                     text NOT NULL,
    model                       text NOT NULL,
    input_tokens                bigint NOT NULL,
    cached_input_tokens         bigint NOT NULL,
    cache_write_input_tokens    bigint NOT NULL,
    output_tokens               bigint NOT NULL,
    cost_micros                 bigint NOT NULL,
    price_version               text NOT NULL,
    created_at                  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, run_id, seq),
    FOREIGN KEY (tenant_id, run_id, seq) REFERENCES run_events (tenant_id, run_id, seq)
);
CREATE INDEX usage_facts_by_time ON usage_facts (tenant_id, created_at);
CREATE TRIGGER usage_facts_immutable
    BEFORE UPDATE OR DELETE ON usage_facts
    FOR EACH ROW EXECUTE FUNCTION tenantry_refuse_change();

ALTER TABLE tenant_policies ENABLE ROW LEVEL SECURITY;
ALTER TABLE tenant_load ENABLE ROW LEVEL SECURITY;
ALTER TABLE tenant_budget ENABLE ROW LEVEL SECURITY;
ALTER TABLE budget_reservations ENABLE ROW LEVEL SECURITY;
ALTER TABLE usage_facts ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON tenant_policies USING (tenant_id = tenantry_current_tenant());
CREATE POLICY tenant_isolation ON tenant_load USING (tenant_id = tenantry_current_tenant());
CREATE POLICY tenant_isolation ON tenant_budget USING (tenant_id = tenantry_current_tenant());
CREATE POLICY tenant_isolation ON budget_reservations
    USING (tenant_id = tenantry_current_tenant());
CREATE POLICY tenant_isolation ON usage_facts USING (tenant_id = tenantry_current_tenant());
GRANT SELECT, INSERT, UPDATE ON tenant_policies, budget_reservations TO tenantry_app;
GRANT SELECT, UPDATE ON tenant_load, tenant_budget TO tenantry_app;
GRANT SELECT, INSERT ON usage_facts TO tenantry_app;

-- Reserve before a model call. 'ok' with the reservation; 'wait' with the seconds until the
-- tenant's bucket holds enough tokens; 'over_cap' when the month's spend would pass the
-- cap; 'lease_lost' when the caller no longer holds the run. Runs as the caller (RLS).
CREATE FUNCTION tenantry_reserve(p_tenant text, p_run uuid, p_epoch bigint,
                                 p_reservation uuid, p_tokens bigint, p_cost bigint,
                                 OUT outcome text, OUT wait_seconds double precision,
                                 OUT spent bigint, OUT cap bigint)
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, public AS $$
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
    SELECT * INTO l FROM public.tenant_budget WHERE tenant_id = p_tenant FOR UPDATE;
    SELECT * INTO p FROM public.tenant_policies WHERE tenant_id = p_tenant;
    IF l.spend_month < date_trunc('month', now())::date THEN
        l.spent_micros := 0;
        l.spend_month := date_trunc('month', now())::date;
    END IF;
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

-- Close a reservation under the run's current epoch: 'settled' with the actual usage
-- (tokens back or further into the bucket, actual cost into the month's spend), or
-- 'released' (nothing was spent: all of it goes back). False if the reservation is not
-- this owner's to close.
CREATE FUNCTION tenantry_close_reservation(p_tenant text, p_run uuid, p_epoch bigint,
                                           p_reservation uuid, p_status text,
                                           p_tokens bigint, p_cost bigint)
RETURNS boolean
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, public AS $$
DECLARE
    v public.budget_reservations;
BEGIN
    UPDATE public.budget_reservations b SET status = p_status, closed_at = now()
    FROM public.runs r
    WHERE b.tenant_id = p_tenant AND b.reservation_id = p_reservation AND b.run_id = p_run
      AND b.status = 'reserved' AND b.lease_epoch = p_epoch
      AND r.tenant_id = b.tenant_id AND r.run_id = b.run_id AND r.lease_epoch = p_epoch
      AND r.status = 'running'
    RETURNING b.* INTO v;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    UPDATE public.tenant_budget l SET
        bucket_tokens = CASE WHEN l.bucket_tokens IS NULL THEN NULL
                             ELSE l.bucket_tokens + v.tokens - p_tokens END,
        spent_micros = CASE WHEN l.spend_month < date_trunc('month', now())::date
                            THEN p_cost ELSE l.spent_micros + p_cost END,
        spend_month = date_trunc('month', now())::date,
        reserved_micros = greatest(l.reserved_micros - v.cost_micros, 0)
    WHERE l.tenant_id = p_tenant;
    RETURN true;
END
$$;

-- The sweeper: reservations whose owner lost the run (epoch moved on, or the run left
-- 'running') are forfeited: the estimate leaves the month's reservations (nothing was
-- billed — usage facts are the bill), the tokens stay spent (the call may have happened).
CREATE FUNCTION tenantry_sweep_reservations(p_limit integer) RETURNS integer
LANGUAGE sql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, public AS $$
    WITH stale AS (
        SELECT b.tenant_id, b.reservation_id, b.cost_micros
        FROM public.budget_reservations b
        JOIN public.runs r ON r.tenant_id = b.tenant_id AND r.run_id = b.run_id
        WHERE b.status = 'reserved'
          AND (r.lease_epoch <> b.lease_epoch OR r.status <> 'running')
        LIMIT p_limit
        FOR UPDATE OF b SKIP LOCKED
    ), closed AS (
        UPDATE public.budget_reservations b SET status = 'forfeited', closed_at = now()
        FROM stale WHERE b.tenant_id = stale.tenant_id
                     AND b.reservation_id = stale.reservation_id
        RETURNING b.tenant_id, b.cost_micros
    ), per_tenant AS (
        SELECT tenant_id, sum(cost_micros) AS cost FROM closed GROUP BY tenant_id
    ), released AS (
        UPDATE public.tenant_budget l
        SET reserved_micros = greatest(l.reserved_micros - per_tenant.cost, 0)
        FROM per_tenant WHERE l.tenant_id = per_tenant.tenant_id
        RETURNING 1
    )
    SELECT count(*)::integer FROM closed
$$;
REVOKE ALL ON FUNCTION tenantry_sweep_reservations(integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION tenantry_sweep_reservations(integer) TO tenantry_app;

-- Global queue depth for admission (cross-tenant, one number).
CREATE FUNCTION tenantry_queue_depth() RETURNS bigint
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public AS $$
    SELECT coalesce(sum(queued), 0)::bigint FROM public.tenant_load
$$;
REVOKE ALL ON FUNCTION tenantry_queue_depth() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION tenantry_queue_depth() TO tenantry_app;

-- The operator API sets a tenant's approval expiry with its policy.
GRANT UPDATE (approval_ttl_seconds) ON tenants TO tenantry_app;

-- Operator usage report: totals per tenant over a window (cross-tenant, so a definer
-- function that returns sums only).
CREATE FUNCTION tenantry_usage_per_tenant(p_from timestamptz, p_to timestamptz)
RETURNS TABLE (tenant_id text, runs bigint, calls bigint, input_tokens numeric,
               cached_input_tokens numeric, output_tokens numeric, cost_micros numeric)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public AS $$
    SELECT f.tenant_id, count(DISTINCT f.run_id), count(*), sum(f.input_tokens),
           sum(f.cached_input_tokens), sum(f.output_tokens), sum(f.cost_micros)
    FROM public.usage_facts f
    WHERE f.created_at >= p_from AND f.created_at < p_to
    GROUP BY f.tenant_id ORDER BY f.tenant_id
$$;
REVOKE ALL ON FUNCTION tenantry_usage_per_tenant(timestamptz, timestamptz) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION tenantry_usage_per_tenant(timestamptz, timestamptz) TO tenantry_app;

-- Scheduler gauges for /metrics, by tenant class (plan) — never by tenant id (bounded
-- label sets, invariant 10).
CREATE FUNCTION tenantry_scheduler_gauges()
RETURNS TABLE (tenant_class text, queued bigint, running bigint, waiting bigint,
               oldest_queued_seconds double precision)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public AS $$
    SELECT t.plan, sum(l.queued)::bigint, sum(l.running)::bigint, sum(l.waiting)::bigint,
           coalesce(extract(epoch FROM now() - (
               SELECT min(r.created_at) FROM public.runs r JOIN public.tenants t2
                   ON t2.tenant_id = r.tenant_id
               WHERE r.status = 'queued' AND t2.plan = t.plan)), 0)::float8
    FROM public.tenant_load l JOIN public.tenants t ON t.tenant_id = l.tenant_id
    GROUP BY t.plan ORDER BY t.plan
$$;
REVOKE ALL ON FUNCTION tenantry_scheduler_gauges() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION tenantry_scheduler_gauges() TO tenantry_app;
