-- Fair scheduling, admission and the budget ledger (DESIGN §7; invariants 8-10).
--
-- Its functions and triggers are routines now, each the source of its latest definition
-- (src/tenantry/db/routines/, ADR 0037): new_tenant, count_runs, bucket_level, month_spend,
-- may_claim, claim_runs, claim_runs_fifo, refuse_change, reserve, close_reservation,
-- sweep_reservations, queue_depth, usage_per_tenant, scheduler_gauges.

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

-- The fair claim takes a fourth argument, p_kind: the claim of 0002 goes (a database
-- migrated before routines still has it).
DROP FUNCTION IF EXISTS tenantry_claim_runs(text, integer, double precision);

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

-- The operator API sets a tenant's approval expiry with its policy.
GRANT UPDATE (approval_ttl_seconds) ON tenants TO tenantry_app;
