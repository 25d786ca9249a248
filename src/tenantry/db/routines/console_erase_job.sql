-- The operator's look-up of an erase job by its id alone (GET /admin/v1/erase-jobs/{id}):
-- a read across tenants, so the console role's, with the runs the tenant has left.

CREATE OR REPLACE FUNCTION tenantry_console_erase_job(p_job uuid)
RETURNS TABLE (job_id uuid, tenant_id text, status text, runs_total bigint,
               runs_deleted bigint, runs_cancelled bigint, secrets_deleted integer,
               tool_servers_deleted integer, blobs_queued bigint, requested_by text,
               created_at timestamptz, finished_at timestamptz, runs_left bigint)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public AS $$
    SELECT j.job_id, j.tenant_id, j.status, j.runs_total, j.runs_deleted, j.runs_cancelled,
           j.secrets_deleted, j.tool_servers_deleted, j.blobs_queued, j.requested_by,
           j.created_at, j.finished_at,
           (SELECT count(*) FROM public.runs r WHERE r.tenant_id = j.tenant_id)
    FROM public.erase_jobs j WHERE j.job_id = p_job
$$;
REVOKE ALL ON FUNCTION tenantry_console_erase_job(uuid)
    FROM PUBLIC, tenantry_app, tenantry_console;
GRANT EXECUTE ON FUNCTION tenantry_console_erase_job(uuid) TO tenantry_console;
