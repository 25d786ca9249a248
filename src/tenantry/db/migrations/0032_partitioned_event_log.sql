-- The event log partitioned inside a cell (issue 20, item 5; ADR 0026): run_events and
-- run_event_payloads become partitioned tables, HASH (run_id) into 32 partitions each, with
-- the same modulus so that event partition N and payload partition N hold the same runs.
-- Every hot read and write names one run, so the planner (or the executor, for a prepared
-- statement's parameter) touches one partition; vacuum, index size and retention's deletes
-- are each bounded by a 1/32 slice of the log. The measurements are in ADR 0026 and
-- benchmarks/event_log.py; benchmarks/event_log.py rewrites the two marked lines below to
-- measure the alternatives (HASH (tenant_id), 8 partitions).
--
-- In place, with the data: the old tables step aside, the new ones are filled from them,
-- then keys, foreign keys, row-level security and grants are made again, and the old
-- tables dropped; the log's triggers are routines, made again on the new tables right
-- after the migrations (ADR 0037). One transaction (migrate.py), so a failure leaves 0031
-- intact; the log is locked against writers while it is copied (ADR 0026 gives the time
-- per million events). The functions that read or write the log (tenantry_commit_step,
-- tenantry_create_runs, tenantry_run_events, tenantry_retention_batch) name the tables in
-- their bodies, resolved when they run, so they reach the new tables unchanged.
--
-- Its functions and triggers are routines now, each the source of its latest definition
-- (src/tenantry/db/routines/, ADR 0037): refuse_change_but_retention and
-- notify_event (the log's triggers), retention_batch (its generic plan, for the partitions).

-- 1. The old tables step aside; their primary-key indexes too, whose names the new keys take.
ALTER TABLE run_event_payloads RENAME TO run_event_payloads_unpartitioned;
ALTER TABLE run_event_payloads_unpartitioned
    RENAME CONSTRAINT run_event_payloads_pkey TO run_event_payloads_unpartitioned_pkey;
ALTER TABLE run_events RENAME TO run_events_unpartitioned;
ALTER TABLE run_events_unpartitioned
    RENAME CONSTRAINT run_events_pkey TO run_events_unpartitioned_pkey;

-- 2. The partitioned tables: the columns, defaults and checks of 0001/0002.
CREATE TABLE run_events (
    tenant_id  text NOT NULL,
    run_id     uuid NOT NULL,
    seq        integer NOT NULL,
    type       text NOT NULL,
    data       jsonb NOT NULL,
    format     smallint NOT NULL DEFAULT 1,
    created_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT run_events_seq_check CHECK (seq >= 1),
    CONSTRAINT run_events_data_check CHECK (octet_length(data::text) <= 8192)
) PARTITION BY HASH (run_id);  -- partition key (benchmarks/event_log.py rewrites it)

CREATE TABLE run_event_payloads (
    tenant_id text NOT NULL,
    run_id    uuid NOT NULL,
    seq       integer NOT NULL,
    data      jsonb NOT NULL
) PARTITION BY HASH (run_id);  -- partition key (benchmarks/event_log.py rewrites it)

-- 3. The partitions. Each has row-level security and the same policy as its parent: a
-- query through the parent is checked by the parent's policy, but one naming a partition
-- is checked by the partition's own (and the application role has no privilege on a
-- partition in the first place: two walls, as everywhere else).
DO $$
DECLARE
    parts CONSTANT integer := 32;  -- partition count (benchmarks/event_log.py rewrites it)
    part text;
BEGIN
    FOR i IN 0 .. parts - 1 LOOP
        FOREACH part IN ARRAY ARRAY['run_events', 'run_event_payloads'] LOOP
            EXECUTE format(
                'CREATE TABLE %I PARTITION OF %I FOR VALUES WITH (MODULUS %s, REMAINDER %s)',
                part || '_p' || lpad(i::text, 2, '0'), part, parts, i);
            EXECUTE format('ALTER TABLE %I ENABLE ROW LEVEL SECURITY',
                           part || '_p' || lpad(i::text, 2, '0'));
            EXECUTE format(
                'CREATE POLICY tenant_isolation ON %I USING (tenant_id = tenantry_current_tenant())',
                part || '_p' || lpad(i::text, 2, '0'));
        END LOOP;
    END LOOP;
END
$$;

-- 4. The rows, before the keys (and the triggers): one index build per partition instead
-- of row-by-row maintenance, and no notification per copied event (tenantry_notify_event).
INSERT INTO run_events (tenant_id, run_id, seq, type, data, format, created_at)
SELECT tenant_id, run_id, seq, type, data, format, created_at FROM run_events_unpartitioned;
INSERT INTO run_event_payloads (tenant_id, run_id, seq, data)
SELECT tenant_id, run_id, seq, data FROM run_event_payloads_unpartitioned;

DROP TABLE run_event_payloads_unpartitioned;
DROP TABLE run_events_unpartitioned;

-- 5. Keys (they contain the partition key, as a partitioned table's must), foreign keys.
ALTER TABLE run_events ADD CONSTRAINT run_events_pkey PRIMARY KEY (tenant_id, run_id, seq);
ALTER TABLE run_event_payloads
    ADD CONSTRAINT run_event_payloads_pkey PRIMARY KEY (tenant_id, run_id, seq);
ALTER TABLE run_events ADD CONSTRAINT run_events_tenant_id_run_id_fkey
    FOREIGN KEY (tenant_id, run_id) REFERENCES runs (tenant_id, run_id);
-- A payload's event: partition to partition (payloads _pNN → events _pNN, the same run_ids
-- by the same key and modulus), not parent to parent. Retention deletes a batch's events
-- with one foreign-key probe per event row; against the partitioned parent each probe
-- prunes 32 partitions at run time, which made a 500-run batch 2.5x slower (ADR 0026);
-- against the one partition it is the plain-table probe it was before.
DO $$
DECLARE
    part text;
BEGIN
    FOR part IN SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
                WHERE i.inhparent = 'run_event_payloads'::regclass ORDER BY c.relname LOOP
        EXECUTE format(
            'ALTER TABLE %I ADD CONSTRAINT %I FOREIGN KEY (tenant_id, run_id, seq) '
            'REFERENCES %I (tenant_id, run_id, seq)',
            part, part || '_event_fkey', replace(part, 'run_event_payloads', 'run_events'));
    END LOOP;
END
$$;

-- 6. Row-level security and grants on the parents (0001, 0002); none on the partitions.
ALTER TABLE run_events ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON run_events USING (tenant_id = tenantry_current_tenant());
ALTER TABLE run_event_payloads ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON run_event_payloads
    USING (tenant_id = tenantry_current_tenant());
GRANT SELECT, INSERT ON run_events, run_event_payloads TO tenantry_app;

-- 7. Statistics for the planner now (autovacuum analyses partitions, never a parent).
ANALYZE run_events, run_event_payloads;
