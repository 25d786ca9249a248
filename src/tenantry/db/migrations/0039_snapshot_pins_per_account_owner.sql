-- A held provider snapshot is sent only on accounts of the owner whose account reported it
-- (issue 35, ADR 0034): a tenant's own (bring-your-own-key) account may report any id at
-- all, and a snapshot id it reported must never go out on a platform account — billed at
-- the platform's price for the model's name — nor a platform-reported one on the tenant's.
--
-- Its functions and triggers are routines now, each the source of its latest definition
-- (src/tenantry/db/routines/, ADR 0037): snapshot_owners_follow, note_model_snapshot_v2,
-- note_model_snapshot, run_for_worker.

-- 1. Per snapshot, the owners of the accounts that reported it: 'platform' (an operator's
--    account) and/or 'tenant' (the tenant's own). Empty: not known (noted by a release
--    before this one); such a snapshot is held on no account until an account reports it.
ALTER TABLE agent_model_snapshots
    ADD COLUMN accepted_on text[] NOT NULL DEFAULT '{}'
        CHECK (accepted_on <@ ARRAY['platform', 'tenant']),
    ADD COLUMN changed_on text[] NOT NULL DEFAULT '{}'
        CHECK (changed_on <@ ARRAY['platform', 'tenant']);
-- What was noted before: a tenant that never had an account of its own can only have been
-- answered on platform accounts. Another tenant's snapshots stay unknown (the log says which
-- account answered, but reading every run's replies is no migration's work): its holds
-- apply again once its accounts report the snapshot.
UPDATE agent_model_snapshots s
SET accepted_on = ARRAY['platform'],
    changed_on = CASE WHEN s.changed_to IS NULL THEN '{}' ELSE ARRAY['platform'] END
WHERE NOT EXISTS (SELECT 1 FROM model_accounts a WHERE a.tenant_id = s.tenant_id);

-- 2. The run as its worker loads it (tenantry_run_for_worker) gains the owners of the
--    accounts that reported each held snapshot (snapshot_pins): a new result type, so the
--    function of 0037 goes (a database migrated before routines still has it).
DROP FUNCTION IF EXISTS tenantry_run_for_worker(text, uuid);
