-- Webhook claims are bounded (issue 15): a delivery that used up its attempts is never
-- claimed again (a worker that died on the last attempt cannot make every other worker
-- retry it forever), and one claim hands out at most p_per_tenant deliveries of a tenant,
-- less those the claiming worker already has in flight for it (p_busy_tenants and
-- p_busy_counts, side by side), so one tenant's many slow receivers cannot take every
-- delivery slot of a worker.
--
-- Its functions and triggers are routines now, each the source of its latest definition
-- (src/tenantry/db/routines/, ADR 0037): claim_webhooks, spent_webhooks.

-- The bounded claim takes four more arguments: the claim of 0002 goes (a database migrated
-- before routines still has it).
DROP FUNCTION IF EXISTS tenantry_claim_webhooks(integer, double precision);
