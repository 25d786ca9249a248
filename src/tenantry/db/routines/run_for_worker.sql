-- What a worker needs of a run it just claimed, in one call (ADR 0023): the run row (NULL
-- epoch when it is not there), its tenant's region and plan, its pinned agent version, and the
-- agent's held provider snapshots (ADR 0034) — snapshot_pins: model → {snapshot, on: the
-- owners of the accounts that reported it}. model_pins, which the previous release's
-- workers send on any account, keeps only the snapshots a platform account reported: on
-- those workers a tenant-reported one is not held at all.

CREATE OR REPLACE FUNCTION tenantry_run_for_worker(p_tenant text, p_run uuid)
RETURNS TABLE (agent_id uuid, agent_version integer, input jsonb, status text,
               lease_epoch bigint, region text, plan text, created_at timestamptz,
               started_at timestamptz, spec jsonb, tool_pins jsonb, model_pins jsonb,
               snapshot_pins jsonb)
LANGUAGE plpgsql STABLE SET search_path = pg_catalog, public AS $$
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
REVOKE ALL ON FUNCTION tenantry_run_for_worker(text, uuid)
    FROM PUBLIC, tenantry_app, tenantry_console;
GRANT EXECUTE ON FUNCTION tenantry_run_for_worker(text, uuid) TO tenantry_app;
