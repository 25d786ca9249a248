"""/openapi.json describes exactly the routes the app serves, with problem+json errors."""

from __future__ import annotations

from fastapi.routing import APIRoute

from tests.support.api import Api


async def test_openapi_matches_the_routes(api: Api) -> None:
    r = await api.client.get("/openapi.json")
    assert r.status_code == 200
    doc = r.json()
    documented = {(path, method.upper()) for path, ops in doc["paths"].items() for method in ops}

    from tenantry.api import (
        activities,
        admin,
        agents,
        approvals,
        billing,
        evaluations,
        inbox,
        metrics,
        model_accounts,
        model_snapshots,
        policy,
        prices,
        retention,
        runs,
    )

    routes = [*admin.router.routes, *agents.router.routes, *evaluations.router.routes,
              *runs.router.routes,
              *billing.router.routes,
              *approvals.router.routes, *model_accounts.router.routes,
              *model_snapshots.router.routes,
              *policy.admin_router.routes, *policy.router.routes, *metrics.router.routes,
              *prices.router.routes, *inbox.router.routes, *activities.router.routes,
              *retention.admin_router.routes, *retention.router.routes]
    served = {
        # The document names a `{model:path}` parameter as `{model}`, as OpenAPI has it.
        (route.path_format, method)
        for route in routes if isinstance(route, APIRoute)
        for method in route.methods
    } | {("/healthz", "GET")}
    assert documented == served
    expected = {("/v1/runs", "POST"), ("/v1/runs", "GET"), ("/v1/runs/{run_id}", "GET"),
                ("/v1/runs/{run_id}/cancel", "POST"), ("/v1/runs/{run_id}/events", "GET"),
                ("/v1/agents", "POST"), ("/v1/agents/{agent_id}", "GET"),
                ("/v1/agents/{agent_id}/versions", "POST"),
                ("/v1/agents/{agent_id}/versions/{version}", "GET"),
                ("/v1/agents/{agent_id}/test-sets", "POST"),
                ("/v1/agents/{agent_id}/test-sets/{test_set_id}", "GET"),
                ("/v1/agents/{agent_id}/evaluations", "POST"),
                ("/v1/agents/{agent_id}/evaluations/{evaluation_id}", "GET"),
                ("/v1/agents/{agent_id}/promote", "POST"),
                ("/v1/agents/{agent_id}/promotions", "GET"),
                ("/admin/v1/tenants", "POST"), ("/admin/v1/tenants/{tenant_id}/api-keys", "POST"),
                ("/admin/v1/model-accounts", "POST"), ("/v1/usage", "GET"),
                ("/admin/v1/tenants/{tenant_id}/policy", "PUT"),
                ("/admin/v1/billing/reconcile", "POST"),
                ("/admin/v1/prices/{model}", "PUT"), ("/admin/v1/prices/{model}", "GET"),
                ("/admin/v1/prices", "GET"), ("/admin/v1/sessions/revoke", "POST"),
                ("/admin/v1/approvals/pending", "GET"),
                ("/admin/v1/tenants/{tenant_id}/approvals/pending", "GET"),
                ("/admin/v1/tenants/{tenant_id}/retention", "PUT"),
                ("/admin/v1/tenants/{tenant_id}/retention", "GET"),
                ("/admin/v1/tenants/{tenant_id}/audit-retention", "PUT"),
                ("/admin/v1/tenants/{tenant_id}/erase", "POST"),
                ("/admin/v1/erase-jobs/{job_id}", "GET"),
                ("/admin/v1/tenants/{tenant_id}/tombstones", "GET"),
                ("/v1/tombstones/{run_id}", "GET"), ("/v1/runs/{run_id}", "DELETE")}
    assert expected <= documented


async def test_openapi_declares_problem_responses_not_422(api: Api) -> None:
    doc = (await api.client.get("/openapi.json")).json()
    assert "Problem" in doc["components"]["schemas"]
    for path, ops in doc["paths"].items():
        for method, op in ops.items():
            assert "422" not in op["responses"], (path, method)
    start = doc["paths"]["/v1/runs"]["post"]
    assert set(start["responses"]) >= {"202", "400", "401", "409", "413"}
    events = doc["paths"]["/v1/runs/{run_id}/events"]["get"]["responses"]["200"]["content"]
    assert set(events) == {"text/event-stream", "application/json"}
    ref = events["application/json"]["schema"]["$ref"].rsplit("/", 1)[1]
    assert ref in doc["components"]["schemas"]


async def test_every_documented_operation_is_served(api: Api) -> None:
    """Ask each documented operation without credentials: a served route answers 401 (or
    200 for the health check), never the router's 404/405."""
    doc = (await api.client.get("/openapi.json")).json()
    for path, ops in doc["paths"].items():
        concrete = (path.replace("{run_id}", "run_" + "0" * 32)
                    .replace("{agent_id}", "agt_" + "0" * 32)
                    .replace("{tenant_id}", "ten_x").replace("{key_id}", "key_x")
                    .replace("{approval_id}", "apr_" + "0" * 32).replace("{name}", "x")
                    .replace("{version}", "1").replace("{model}", "qwen2.5:7b"))
        for method in ops:
            r = await api.client.request(method.upper(), concrete)
            assert r.status_code in (200, 401), (method, path, r.status_code, r.text)


async def test_openapi_states_the_input_rules(api: Api) -> None:
    """What the edge enforces is in the document, so a client (or Schemathesis) can know it."""
    doc = (await api.client.get("/openapi.json")).json()
    schemas = doc["components"]["schemas"]

    def field(model: str, name: str) -> dict[str, object]:
        prop: dict[str, object] = schemas[model]["properties"][name]
        options = prop.get("anyOf")
        return options[0] if isinstance(options, list) else prop  # `X | None`: the X

    assert field("CreatePlatformAccount", "tpm")["maximum"] == 2**31 - 1
    assert field("NewVersion", "version")["maximum"] == 2**31 - 1
    for model, name in (("CreateAgent", "name"), ("CreateAgent", "model"),
                        ("CreateAgent", "system_prompt"), ("Decide", "comment"),
                        ("CreateTenant", "name"), ("PutSecret", "value")):
        assert field(model, name)["pattern"] == "^[^\\x00]*$", (model, name)
        assert "maxLength" in field(model, name), (model, name)
    url = field("RegisterToolServer", "url")
    assert str(url["pattern"]).startswith("^https?://") and url["maxLength"] == 2048
    assert field("StartRun", "webhook")["pattern"] == url["pattern"]
    # Every integer query parameter and header says its real bounds (the seq is an int4).
    bounds = {}
    for path, ops in doc["paths"].items():
        for op in ops.values():
            for param in op.get("parameters", []):
                schema = param["schema"].get("anyOf", [param["schema"]])[0]
                if schema.get("type") == "integer":
                    bounds[(path, param["name"])] = (schema["minimum"], schema["maximum"])
    events = "/v1/runs/{run_id}/events"
    assert bounds[(events, "last-event-id")] == bounds[(events, "after")] == (0, 2**31 - 1)
    assert bounds[(events, "limit")] == (1, 1000)
    assert bounds[("/v1/runs", "limit")] == bounds[("/admin/v1/tenants", "limit")] == (1, 200)
    assert bounds[("/admin/v1/billing/reconciliations", "limit")] == (1, 200)
    assert bounds[("/admin/v1/prices/{model}", "limit")] == (1, 1000)
    assert bounds[("/admin/v1/approvals/pending", "each")] == (1, 50)


async def test_every_error_is_documented_as_problem_json(api: Api) -> None:
    doc = (await api.client.get("/openapi.json")).json()
    for path, ops in doc["paths"].items():
        for method, op in ops.items():
            for status, response in op["responses"].items():
                if status[0] in "45":
                    assert list(response["content"]) == ["application/problem+json"], (
                        method, path, status)
            needs = op.get("security", [])
            if path == "/healthz":
                assert not needs and "401" not in op["responses"]
            else:
                scheme = "operatorToken" if path.startswith(("/admin/", "/metrics")) else "apiKey"
                assert needs == [{scheme: []}] and "401" in op["responses"], (method, path)
    pin = doc["paths"]["/admin/v1/tenants/{tenant_id}/tool-servers/{name}/pin"]["post"]
    assert {"502", "500"} <= set(pin["responses"])
