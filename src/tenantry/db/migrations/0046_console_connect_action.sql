-- The console connects a tenant's OAuth tool server (ADR 0040): the action log records it
-- as 'connect_tool_server'. Expand only: the previous release writes none of it, and every
-- value it writes is still allowed.
ALTER TABLE console_actions DROP CONSTRAINT console_actions_action_check;
-- NOT VALID then VALIDATE: the check of the rows already there takes no lock that stops
-- the actions being recorded meanwhile.
ALTER TABLE console_actions ADD CONSTRAINT console_actions_action_check
    CHECK (action IN ('cancel_run', 'approve', 'deny', 'requeue_task', 'revoke_api_key',
                      'pause_admissions', 'resume_admissions', 'connect_tool_server'))
    NOT VALID;
ALTER TABLE console_actions VALIDATE CONSTRAINT console_actions_action_check;
