-- The backstop of a tenant's 'locked' state while it moves to another cell (ADR 0029):
-- whatever path a write takes (an API process whose cache has not heard yet, the console,
-- an operator call), it cannot change a row being copied. A definer, so every role that
-- writes these tables may check (none may read the rest).
--
-- The tables a request or a background job writes. The event log and the facts written
-- with a step are not among them: only a leased run's commit writes them, and a locked
-- tenant has no leased run (that is the condition of 'locked'); a trigger there would cost
-- every step for nothing.

CREATE OR REPLACE FUNCTION tenantry_refuse_frozen() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM public.frozen_tenants f
               WHERE f.tenant_id = NEW.tenant_id AND f.state <> 'draining') THEN
        RAISE EXCEPTION 'tenant % is moving to another cell', NEW.tenant_id
            USING ERRCODE = 'TR020';
    END IF;
    RETURN NEW;
END
$$;
REVOKE ALL ON FUNCTION tenantry_refuse_frozen() FROM PUBLIC, tenantry_app, tenantry_console;

CREATE OR REPLACE TRIGGER activity_bundles_refuse_frozen
    BEFORE INSERT OR UPDATE ON activity_bundles
    FOR EACH ROW EXECUTE FUNCTION tenantry_refuse_frozen();

CREATE OR REPLACE TRIGGER activity_versions_refuse_frozen
    BEFORE INSERT OR UPDATE ON activity_versions
    FOR EACH ROW EXECUTE FUNCTION tenantry_refuse_frozen();

CREATE OR REPLACE TRIGGER agent_evaluations_refuse_frozen
    BEFORE INSERT OR UPDATE ON agent_evaluations
    FOR EACH ROW EXECUTE FUNCTION tenantry_refuse_frozen();

CREATE OR REPLACE TRIGGER agent_model_snapshot_promotions_refuse_frozen
    BEFORE INSERT OR UPDATE ON agent_model_snapshot_promotions
    FOR EACH ROW EXECUTE FUNCTION tenantry_refuse_frozen();

CREATE OR REPLACE TRIGGER agent_model_snapshots_refuse_frozen
    BEFORE INSERT OR UPDATE ON agent_model_snapshots
    FOR EACH ROW EXECUTE FUNCTION tenantry_refuse_frozen();

CREATE OR REPLACE TRIGGER agent_promotions_refuse_frozen
    BEFORE INSERT OR UPDATE ON agent_promotions
    FOR EACH ROW EXECUTE FUNCTION tenantry_refuse_frozen();

CREATE OR REPLACE TRIGGER agent_test_sets_refuse_frozen
    BEFORE INSERT OR UPDATE ON agent_test_sets
    FOR EACH ROW EXECUTE FUNCTION tenantry_refuse_frozen();

CREATE OR REPLACE TRIGGER agent_version_flags_refuse_frozen
    BEFORE INSERT OR UPDATE ON agent_version_flags
    FOR EACH ROW EXECUTE FUNCTION tenantry_refuse_frozen();

CREATE OR REPLACE TRIGGER agent_versions_refuse_frozen
    BEFORE INSERT OR UPDATE ON agent_versions
    FOR EACH ROW EXECUTE FUNCTION tenantry_refuse_frozen();

CREATE OR REPLACE TRIGGER agents_refuse_frozen
    BEFORE INSERT OR UPDATE ON agents
    FOR EACH ROW EXECUTE FUNCTION tenantry_refuse_frozen();

CREATE OR REPLACE TRIGGER api_keys_refuse_frozen
    BEFORE INSERT OR UPDATE ON api_keys
    FOR EACH ROW EXECUTE FUNCTION tenantry_refuse_frozen();
CREATE OR REPLACE TRIGGER app_sessions_refuse_frozen
    BEFORE INSERT OR UPDATE ON app_sessions
    FOR EACH ROW EXECUTE FUNCTION tenantry_refuse_frozen();

CREATE OR REPLACE TRIGGER approvals_refuse_frozen
    BEFORE INSERT OR UPDATE ON approvals
    FOR EACH ROW EXECUTE FUNCTION tenantry_refuse_frozen();

CREATE OR REPLACE TRIGGER evaluation_results_refuse_frozen
    BEFORE INSERT OR UPDATE ON evaluation_results
    FOR EACH ROW EXECUTE FUNCTION tenantry_refuse_frozen();

CREATE OR REPLACE TRIGGER evaluation_runs_refuse_frozen
    BEFORE INSERT OR UPDATE ON evaluation_runs
    FOR EACH ROW EXECUTE FUNCTION tenantry_refuse_frozen();

CREATE OR REPLACE TRIGGER model_accounts_refuse_frozen
    BEFORE INSERT OR UPDATE ON model_accounts
    FOR EACH ROW EXECUTE FUNCTION tenantry_refuse_frozen();

CREATE OR REPLACE TRIGGER retention_policies_refuse_frozen
    BEFORE INSERT OR UPDATE ON retention_policies
    FOR EACH ROW EXECUTE FUNCTION tenantry_refuse_frozen();

CREATE OR REPLACE TRIGGER runs_refuse_frozen
    BEFORE INSERT OR UPDATE ON runs
    FOR EACH ROW EXECUTE FUNCTION tenantry_refuse_frozen();

CREATE OR REPLACE TRIGGER secrets_refuse_frozen
    BEFORE INSERT OR UPDATE ON secrets
    FOR EACH ROW EXECUTE FUNCTION tenantry_refuse_frozen();
CREATE OR REPLACE TRIGGER sign_in_links_refuse_frozen
    BEFORE INSERT OR UPDATE ON sign_in_links
    FOR EACH ROW EXECUTE FUNCTION tenantry_refuse_frozen();

CREATE OR REPLACE TRIGGER tenant_keys_refuse_frozen
    BEFORE INSERT OR UPDATE ON tenant_keys
    FOR EACH ROW EXECUTE FUNCTION tenantry_refuse_frozen();

CREATE OR REPLACE TRIGGER tenant_policies_refuse_frozen
    BEFORE INSERT OR UPDATE ON tenant_policies
    FOR EACH ROW EXECUTE FUNCTION tenantry_refuse_frozen();
CREATE OR REPLACE TRIGGER tenant_users_refuse_frozen
    BEFORE INSERT OR UPDATE ON tenant_users
    FOR EACH ROW EXECUTE FUNCTION tenantry_refuse_frozen();

CREATE OR REPLACE TRIGGER tenants_refuse_frozen
    BEFORE INSERT OR UPDATE ON tenants
    FOR EACH ROW EXECUTE FUNCTION tenantry_refuse_frozen();

CREATE OR REPLACE TRIGGER test_case_sources_refuse_frozen
    BEFORE INSERT OR UPDATE ON test_case_sources
    FOR EACH ROW EXECUTE FUNCTION tenantry_refuse_frozen();

CREATE OR REPLACE TRIGGER tool_servers_refuse_frozen
    BEFORE INSERT OR UPDATE ON tool_servers
    FOR EACH ROW EXECUTE FUNCTION tenantry_refuse_frozen();

CREATE OR REPLACE TRIGGER tool_server_oauth_refuse_frozen
    BEFORE INSERT OR UPDATE ON tool_server_oauth
    FOR EACH ROW EXECUTE FUNCTION tenantry_refuse_frozen();
