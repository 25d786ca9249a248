-- The operator's action log records every change the operator API makes (issue 41): each
-- non-GET request to /admin/v1 by the holder of the operator token, named by its route
-- ('POST /admin/v1/model-accounts', as the tenant's audit trail names a change), refused
-- ones with their status too. Until now it held a fixed list of console actions, and
-- missed the creation of tenants, keys, secrets, tool servers, model accounts and prices.
-- Expand only: every value the previous release writes is still allowed, and no function
-- it calls changes (tenantry_console_record_action and tenantry_console_actions take and
-- return the tenant as text, which may now be NULL).
-- Numbered 0056: 0055 is the operator users' (merged meanwhile); migrations run 1..N.

-- An action is one of the console's names, or an operator route: its method and path
-- template. NOT VALID then VALIDATE, as 0046: the check of the rows already there takes no
-- lock that stops the actions being recorded meanwhile.
ALTER TABLE console_actions DROP CONSTRAINT console_actions_action_check;
ALTER TABLE console_actions ADD CONSTRAINT console_actions_action_check
    CHECK (action IN ('cancel_run', 'approve', 'deny', 'requeue_task', 'revoke_api_key',
                      'pause_admissions', 'resume_admissions', 'connect_tool_server')
           OR (action ~ '^(POST|PUT|PATCH|DELETE) /admin/v1/[^ ]*$'
               AND length(action) <= 200))
    NOT VALID;
ALTER TABLE console_actions VALIDATE CONSTRAINT console_actions_action_check;

-- A platform-wide action (a model account, a price, a console sessions' revocation) is
-- no tenant's: NULL, rather than a sentinel a tenant id could one day equal. The row-level
-- security policy (tenant_id = tenantry_current_tenant()) shows such a row to no tenant,
-- which is right: no role reads the table but through the owner's functions, and the
-- console's filter by tenant (tenant_id = p_tenant) leaves them out, as it should. A
-- tenant moved to another cell (cells/copy.py copies rows by tenant_id) leaves them where
-- they were made. The previous release's Actions page, during a rolling upgrade, shows
-- such a row's tenant as "None"; it reads nothing else of it.
ALTER TABLE console_actions ALTER COLUMN tenant_id DROP NOT NULL;
