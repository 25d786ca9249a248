"""/openapi.json describes exactly the routes the app serves, with problem+json errors."""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Awaitable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from fastapi.routing import APIRoute

from tests.support.api import Api
from tests.support.worker import Fakes


async def test_openapi_matches_the_routes(api: Api) -> None:
    r = await api.client.get("/openapi.json")
    assert r.status_code == 200
    doc = r.json()
    documented = {(path, method.upper()) for path, ops in doc["paths"].items() for method in ops}

    from tenantry.api import (
        activities,
        admin,
        agents,
        api_keys,
        approvals,
        audit_trail,
        billing,
        evaluations,
        exports,
        inbox,
        metrics,
        model_accounts,
        model_snapshots,
        operator_runs,
        operators,
        own_model_accounts,
        own_tool_servers,
        policy,
        prices,
        retention,
        run_blobs,
        runs,
        tool_servers,
        users,
        webhooks,
    )

    routes = [*admin.router.routes, *tool_servers.router.routes, *own_tool_servers.router.routes,
              *tool_servers.callback_router.routes, *agents.router.routes,
              *evaluations.router.routes,
              *runs.router.routes, *run_blobs.router.routes,
              *billing.router.routes,
              *approvals.router.routes, *model_accounts.router.routes,
              *own_model_accounts.router.routes,
              *model_snapshots.router.routes,
              *policy.admin_router.routes, *policy.router.routes, *metrics.router.routes,
              *prices.router.routes, *inbox.router.routes, *operator_runs.router.routes,
              *activities.router.routes,
              *retention.admin_router.routes, *retention.router.routes,
              *audit_trail.router.routes, *audit_trail.admin_router.routes,
              *api_keys.router.routes, *exports.router.routes,
              *webhooks.router.routes, *users.router.routes,
              *users.admin_router.routes, *operators.router.routes,
              *operators.token_router.routes]
    served = {
        # The document names a `{model:path}` parameter as `{model}`, as OpenAPI has it.
        (route.path_format, method)
        for route in routes if isinstance(route, APIRoute)
        for method in route.methods
    } | {("/healthz", "GET"), ("/readyz", "GET")}
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
                ("/v1/tool-servers", "POST"), ("/v1/tool-servers/{name}/connect", "POST"),
                ("/v1/tool-servers/{name}", "DELETE"), ("/v1/secrets/{name}", "PUT"),
                ("/v1/secrets/{name}", "DELETE"),
                ("/admin/v1/tenants/{tenant_id}/tool-servers/{name}", "DELETE"),
                ("/admin/v1/model-accounts", "POST"), ("/v1/usage", "GET"),
                ("/v1/model-accounts", "POST"), ("/v1/model-accounts", "GET"),
                ("/v1/model-accounts/{account_id}", "GET"),
                ("/v1/model-accounts/{account_id}", "DELETE"),
                ("/v1/model-accounts/{account_id}/api-key", "PUT"),
                ("/admin/v1/tenants/{tenant_id}/policy", "PUT"),
                ("/admin/v1/billing/reconcile", "POST"),
                ("/admin/v1/prices/{model}", "PUT"), ("/admin/v1/prices/{model}", "GET"),
                ("/admin/v1/prices", "GET"), ("/admin/v1/sessions/revoke", "POST"),
                ("/admin/v1/approvals/pending", "GET"),
                ("/admin/v1/tenants/{tenant_id}/approvals/pending", "GET"),
                ("/admin/v1/tenants/{tenant_id}/runs/{run_id}", "GET"),
                ("/admin/v1/tenants/{tenant_id}/runs/{run_id}/trace", "GET"),
                ("/admin/v1/tenants/{tenant_id}/runs/{run_id}/events", "GET"),
                ("/admin/v1/tenants/{tenant_id}/approvals", "GET"),
                ("/admin/v1/tenants/{tenant_id}/approvals/{approval_id}", "GET"),
                ("/admin/v1/tenants/{tenant_id}/approvals/{approval_id}/decision", "POST"),
                ("/admin/v1/tenants/{tenant_id}/retention", "PUT"),
                ("/admin/v1/tenants/{tenant_id}/retention", "GET"),
                ("/admin/v1/tenants/{tenant_id}/audit-retention", "PUT"),
                ("/admin/v1/tenants/{tenant_id}/erase", "POST"),
                ("/admin/v1/erase-jobs/{job_id}", "GET"),
                ("/admin/v1/tenants/{tenant_id}/tombstones", "GET"),
                ("/v1/tombstones/{run_id}", "GET"), ("/v1/runs/{run_id}", "DELETE"),
                ("/v1/api-keys", "POST"), ("/v1/api-keys/{key_id}/rotate", "POST"),
                ("/v1/audit", "GET"), ("/admin/v1/tenants/{tenant_id}/audit", "GET"),
                ("/v1/exports", "POST"), ("/v1/exports", "GET"),
                ("/v1/exports/{export_id}", "GET"), ("/v1/exports/{export_id}/archive", "GET"),
                ("/v1/webhook-endpoints", "POST"), ("/v1/webhook-endpoints", "GET"),
                ("/v1/webhook-endpoints/{endpoint_id}", "GET"),
                ("/v1/webhook-endpoints/{endpoint_id}", "DELETE"),
                ("/v1/webhook-secret/rotate", "POST"), ("/v1/webhook-deliveries", "GET"),
                ("/v1/users", "POST"), ("/v1/users", "GET"), ("/v1/users/{user_id}", "GET"),
                ("/v1/users/{user_id}", "PATCH"), ("/v1/users/{user_id}", "DELETE"),
                ("/v1/users/{user_id}/sign-in-links", "POST"),
                ("/admin/v1/tenants/{tenant_id}/users", "POST"),
                ("/admin/v1/tenants/{tenant_id}/users/{user_id}/sign-in-links", "POST"),
                ("/admin/v1/operators", "POST"), ("/admin/v1/operators", "GET"),
                ("/admin/v1/operators/{operator_id}", "GET"),
                ("/admin/v1/operators/{operator_id}", "PATCH"),
                ("/admin/v1/operators/{operator_id}", "DELETE"),
                ("/admin/v1/operators/{operator_id}/sign-in-links", "POST"),
                ("/admin/v1/operator-token/rotate", "POST")}
    assert expected <= documented


async def test_openapi_declares_problem_responses_not_422(api: Api) -> None:
    doc = (await api.client.get("/openapi.json")).json()
    assert "Problem" in doc["components"]["schemas"]
    # Validation errors are 400 problem+json: FastAPI's own 422 is in no operation. A 422
    # an operation declares itself (a rule of the platform's that no schema states: a region
    # no cell serves, a tool server URL the operator's rules refuse) stays, as a problem.
    own_422 = set()
    for path, ops in doc["paths"].items():
        for method, op in ops.items():
            declared = op["responses"].get("422")
            if declared is None:
                continue
            assert declared["description"] != "Validation Error", (path, method)
            assert "application/problem+json" in declared["content"], (path, method)
            own_422.add((method, path))
    assert {("post", "/admin/v1/tenants"), ("post", "/v1/tool-servers"),
            ("post", "/v1/model-accounts")} <= own_422
    start = doc["paths"]["/v1/runs"]["post"]
    assert set(start["responses"]) >= {"202", "400", "401", "409", "413"}
    events = doc["paths"]["/v1/runs/{run_id}/events"]["get"]["responses"]["200"]["content"]
    assert set(events) == {"text/event-stream", "application/json"}
    ref = events["application/json"]["schema"]["$ref"].rsplit("/", 1)[1]
    assert ref in doc["components"]["schemas"]


async def test_every_documented_operation_is_served(api: Api) -> None:
    """Ask each documented operation without credentials: a served route answers 401 (or
    200 for the health check; for the OAuth callback, which takes no key but a state, the
    404 of no such state), never the router's 404/405."""
    doc = (await api.client.get("/openapi.json")).json()
    for path, ops in doc["paths"].items():
        concrete = (path.replace("{run_id}", "run_" + "0" * 32)
                    .replace("{agent_id}", "agt_" + "0" * 32)
                    .replace("{tenant_id}", "ten_x").replace("{key_id}", "key_x")
                    .replace("{approval_id}", "apr_" + "0" * 32).replace("{name}", "x")
                    .replace("{version}", "1").replace("{model}", "qwen2.5:7b"))
        for method in ops:
            r = await api.client.request(method.upper(), concrete)
            expected = (404,) if path in PUBLIC else (200, 401)
            assert r.status_code in expected, (method, path, r.status_code, r.text)


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
            if path in ("/healthz", "/readyz") or path in PUBLIC:
                assert not needs and "401" not in op["responses"]
            else:
                if path.startswith(("/admin/", "/metrics")):
                    assert needs == [{"operatorToken": []}], (method, path)
                else:  # a tenant key, and the one scope it needs (test_route_scopes.py)
                    [[(scheme, [scope])]] = [list(n.items()) for n in needs]
                    assert scheme == "apiKey" and op["x-tenantry-scope"] == scope
                    assert "403" in op["responses"], (method, path)
                assert "401" in op["responses"], (method, path)
    pin = doc["paths"]["/admin/v1/tenants/{tenant_id}/tool-servers/{name}/pin"]["post"]
    assert {"502", "500"} <= set(pin["responses"])


#: Operations that take no credential besides the health check: where a browser comes back.
PUBLIC = {"/oauth/callback"}


def _concrete(path: str) -> str:
    """A path of the document with a value in each parameter (none need exist)."""
    return re.sub(r"\{[^}]+\}", "x1", path)


async def test_a_method_not_documented_is_405_naming_exactly_the_documented_ones(
    api: Api,
) -> None:
    """Every path: OPTIONS (never documented) answers 405, and its `Allow` lists what the
    document lists for the path — all of it, not the first route's method only."""
    doc = (await api.client.get("/openapi.json")).json()
    for path, ops in doc["paths"].items():
        r = await api.client.options(_concrete(path))
        assert r.status_code == 405, (path, r.status_code, r.text)
        assert r.headers["content-type"] == "application/problem+json"
        assert r.json()["type"] == "method_not_allowed"
        allowed = {m.strip() for m in r.headers["allow"].split(",")}
        assert allowed == {m.upper() for m in ops}, path
    r = await api.client.patch("/admin/v1/tenants/acme/policy", headers=api.operator)
    assert (r.status_code, r.headers["allow"]) == (405, "GET, PUT")


async def test_parameters_are_left_out_never_null_and_cursors_state_their_keys(
    api: Api,
) -> None:
    """A generated client never sends `null` in a query or header (an optional parameter
    is left out), and knows what a cursor of each list looks like."""
    doc = (await api.client.get("/openapi.json")).json()
    cursors = {}
    for path, ops in doc["paths"].items():
        for method, op in ops.items():
            for param in op.get("parameters", []):
                assert "null" not in json.dumps(param["schema"]), (method, path, param)
                if param["name"] == "cursor":
                    cursors[path] = param["schema"]["pattern"]
    assert cursors["/v1/runs"] == "^run_[0-9a-f]{32}$"
    assert cursors["/admin/v1/tenants"] == "^[a-z0-9][a-z0-9_-]{2,63}$"
    assert cursors["/v1/activity-tasks/{task_id}/attempts"] == "^[0-9]{1,10}$"
    assert len(cursors) >= 18  # every list
    # A cursor of the pattern is a position (past the end: an empty page); anything else
    # is refused before a query runs.
    _, h = await api.tenant()
    r = await api.client.get(f"/v1/runs?cursor=run_{'0' * 32}", headers=h)
    assert r.status_code == 200 and r.json() == {"data": [], "next_cursor": None}
    r = await api.client.get("/v1/runs?status=null", headers=h)
    assert r.status_code == 400 and r.json()["type"] == "validation_error"
    for bad in (f"run_{'0' * 31}", f"agt_{'0' * 32}", f"run_{'A' * 32}", "0"):
        r = await api.client.get(f"/v1/runs?cursor={bad}", headers=h)
        assert r.status_code == 400, (bad, r.text)


async def test_bodies_state_their_cross_field_rules_and_stored_json(api: Api) -> None:
    doc = (await api.client.get("/openapi.json")).json()
    schemas = doc["components"]["schemas"]
    stored = schemas["StoredJson"]
    assert {"type": "number", "minimum": -(2**63), "maximum": 2**64 - 1} in stored["anyOf"]
    start = schemas["StartRun"]["properties"]["input"]
    assert start["not"] == {"type": "null"}  # `input: null` is refused, so not "valid"
    assert [o["required"] for o in schemas["ReconcileIn"]["oneOf"]] == [["export"], ["fetch"]]
    assert [o["required"] for o in schemas["CaseBody"]["anyOf"]] == [["input"], ["from_run"]]
    files = schemas["CreateActivity"]["properties"]["files"]
    assert "patternProperties" not in files and "pattern" in files["propertyNames"]
    assert "pattern" in files["additionalProperties"]  # base64
    # What a body names must exist: 409 with `field`, declared where it can happen.
    for method, path in (("post", "/v1/agents"), ("post", "/v1/agents/{agent_id}/versions"),
                         ("post", "/v1/agents/{agent_id}/test-sets"),
                         ("post", "/v1/agents/{agent_id}/evaluations"),
                         ("post", "/v1/agents/{agent_id}/promote"),
                         ("post", "/v1/agents/{agent_id}/model-snapshots/hold"),
                         ("post", "/v1/activities"), ("put", "/admin/v1/prices/sandbox")):
        assert "409" in doc["paths"][path][method]["responses"], (method, path)


def _linked(doc: dict[str, Any]) -> set[tuple[str, str, str]]:
    """Every link of the document: (source operation, status, link name)."""
    return {(f"{method.upper()} {path}", status, name)
            for path, ops in doc["paths"].items() for method, op in ops.items()
            for status, response in op["responses"].items()
            for name in response.get("links", {})}


@dataclass
class _Step:
    operation: str  # "POST /v1/runs"
    path_params: dict[str, str]
    status: int
    body: Any


class _Links:
    """Calls the API and follows the document's links from its answers, evaluating their
    runtime expressions ($response.body#/..., $request.path....) as a client would."""

    def __init__(self, api: Api, doc: dict[str, Any]) -> None:
        self.api, self.doc = api, doc
        self.followed: set[tuple[str, str, str]] = set()

    async def call(self, operation: str, params: dict[str, str], body: Any,
                   headers: dict[str, str]) -> _Step:
        method, template = operation.split(" ", 1)
        path = template.format(**params)
        r = await self.api.client.request(method, path, json=body, headers=headers)
        return _Step(operation, params, r.status_code,
                     r.json() if r.headers.get("content-type", "").endswith("json") else None)

    def _value(self, expression: Any, source: _Step) -> Any:
        if isinstance(expression, dict):
            return {k: self._value(v, source) for k, v in expression.items()}
        if isinstance(expression, list):
            return [self._value(v, source) for v in expression]
        if not isinstance(expression, str) or not expression.startswith("$"):
            return expression
        if expression.startswith("$request.path."):
            return source.path_params[expression.removeprefix("$request.path.")]
        assert expression.startswith("$response.body#/"), expression
        found = source.body
        for part in expression.removeprefix("$response.body#/").split("/"):
            found = found[int(part)] if isinstance(found, list) else found[part]
        return found

    async def follow(self, source: _Step, name: str, headers: dict[str, str],
                     body: dict[str, Any] | None = None) -> _Step:
        method, path = source.operation.split(" ", 1)
        link = self.doc["paths"][path][method.lower()]["responses"][str(source.status)][
            "links"][name]
        pointer, target_method = link["operationRef"].removeprefix("#/paths/").rsplit("/", 1)
        target = pointer.replace("~1", "/").replace("~0", "~")
        assert target_method in self.doc["paths"][target], link
        params = self._value(link.get("parameters", {}), source)
        sent = {**(body or {}), **self._value(link.get("requestBody", {}), source)} or None
        self.followed.add((source.operation, str(source.status), name))
        return await self.call(f"{target_method.upper()} {target}", params, sent, headers)


async def _expect(step: Awaitable[_Step], status: int) -> _Step:
    done = await step
    assert done.status == status, (done.operation, done.status, done.body)
    return done


async def test_every_link_leads_where_it_says(api: Api, fakes: Fakes) -> None:
    """Each link of the document, followed from a real answer as a client would follow it,
    names an operation and inputs that work: what was created is read, versioned, run,
    cancelled, deleted (and then gone), and so on. Every link is walked here."""
    doc = (await api.client.get("/openapi.json")).json()
    w = _Links(api, doc)
    op = api.operator

    # Operator: a tenant, its keys, secrets, tool server, its own model account.
    tenant = await _expect(w.call("POST /admin/v1/tenants", {}, {"name": "Linked"}, op), 201)
    for name in ("GetTenant", "GetPolicy", "GetRetention"):
        await _expect(w.follow(tenant, name, op), 200)
    key = await _expect(w.follow(tenant, "IssueKey", op), 201)
    await _expect(w.follow(key, "GetKey", op), 200)
    h = {"Authorization": f"Bearer {key.body['api_key']}"}
    spare = await _expect(w.follow(tenant, "IssueKey", op), 201)
    await _expect(w.follow(spare, "RevokeKey", op), 200)
    await _expect(w.follow(spare, "GetKey", op), 404)  # revoked: gone from its URL
    tenant_id = tenant.body["tenant_id"]
    secret = await _expect(w.call("PUT /admin/v1/tenants/{tenant_id}/secrets/{name}",
                                  {"tenant_id": tenant_id, "name": "openai-key"},
                                  {"value": "sk-linked"}, op), 201)
    await _expect(w.follow(secret, "GetSecret", op), 200)
    again = await _expect(w.call("PUT /admin/v1/tenants/{tenant_id}/secrets/{name}",
                                 secret.path_params, {"value": "sk-other"}, op), 200)
    await _expect(w.follow(again, "GetSecret", op), 200)
    server = await _expect(w.follow(tenant, "RegisterToolServer", op, body={
        "name": "effects", "url": fakes.mcp.url, "honours_idempotency_keys": True}), 201)
    await _expect(w.follow(server, "GetToolServer", op), 200)
    await _expect(w.follow(server, "Repin", op), 200)
    own = await _expect(w.call("POST /admin/v1/tenants/{tenant_id}/model-accounts",
                               {"tenant_id": tenant_id},
                               {"provider": "openai", "base_url": "http://127.0.0.1:9/v1",
                                "models": ["scripted"], "region": "us",
                                "secret_name": "openai-key"}, op), 201)
    await _expect(w.follow(own, "GetTenantAccount", op), 200)
    await _expect(w.follow(own, "DisableAccount", op), 200)
    await _expect(w.follow(own, "GetTenantAccount", op), 404)  # disabled: gone

    # Prices and platform accounts.
    account = {"provider": "openai", "base_url": "http://127.0.0.1:9/v1", "region": "us"}
    price = await _expect(w.call("PUT /admin/v1/prices/{model}", {"model": "linked-model"},
                                 {"input_per_m": 1, "cached_input_per_m": 1,
                                  "output_per_m": 1}, op), 201)
    await _expect(w.follow(price, "PriceHistory", op), 200)
    served = await _expect(w.follow(price, "RegisterAccount", op, body=account), 201)
    assert served.body["models"] == ["linked-model"]
    await _expect(w.follow(served, "GetAccount", op), 200)
    await _expect(w.follow(served, "DisableAccount", op), 200)
    await _expect(w.follow(served, "GetAccount", op), 404)  # disabled: gone
    # The same version again (200): its links are the same.
    later = {"input_per_m": 2, "cached_input_per_m": 2, "output_per_m": 2,
             "effective_from": (datetime.now(UTC) + timedelta(days=1)).isoformat()}
    await _expect(w.call("PUT /admin/v1/prices/{model}", {"model": "linked-model"}, later,
                         op), 201)
    same = await _expect(w.call("PUT /admin/v1/prices/{model}", {"model": "linked-model"},
                                later, op), 200)
    await _expect(w.follow(same, "PriceHistory", op), 200)
    await _expect(w.follow(same, "RegisterAccount", op, body=account), 201)
    for status in (201, 200):
        sandbox = await _expect(w.call("PUT /admin/v1/prices/sandbox", {}, {
            "per_second_micros": 30, "effective_from": later["effective_from"]}, op), status)
        await _expect(w.follow(sandbox, "PriceHistory", op), 200)
    listed = await _expect(w.call("GET /admin/v1/prices", {}, None, op), 200)
    await _expect(w.follow(listed, "RegisterAccount", op, body=account), 201)

    # The tenant's own secrets and tool servers (the operator's registration of the same
    # server removed first: its tools' names are taken while it is there).
    await _expect(w.call("DELETE /admin/v1/tenants/{tenant_id}/tool-servers/{name}",
                         {"tenant_id": tenant_id, "name": "effects"}, None, op), 204)
    for status in (201, 200):
        mine = await _expect(w.call("PUT /v1/secrets/{name}", {"name": "mine"},
                                    {"value": "s3cret"}, h), status)
        await _expect(w.follow(mine, "GetSecret", h), 200)
    own_server = await _expect(w.call("POST /v1/tool-servers", {}, {
        "name": "own-effects", "url": fakes.mcp.url, "honours_idempotency_keys": True,
        "secret": "mine"}, h), 201)
    await _expect(w.follow(own_server, "GetToolServer", h), 200)
    await _expect(w.follow(own_server, "Connect", h), 409)  # not an OAuth server
    own_account = await _expect(w.call("POST /v1/model-accounts", {}, {
        "provider": "openai", "base_url": "http://127.0.0.1:9/v1", "models": ["scripted"],
        "region": "us", "api_key": "sk-own"}, h), 201)
    await _expect(w.follow(own_account, "GetOwnAccount", h), 200)
    await _expect(w.follow(own_account, "RotateKey", h, body={"api_key": "sk-new"}), 200)
    await _expect(w.follow(own_account, "DisableOwnAccount", h), 200)
    await _expect(w.follow(own_account, "GetOwnAccount", h), 404)  # disabled: gone
    # A webhook endpoint (a public literal: this API vets addresses, nothing is sent).
    endpoint = await _expect(w.call("POST /v1/webhook-endpoints", {},
                                    {"url": "https://93.184.215.14/hook"}, h), 201)
    await _expect(w.follow(endpoint, "GetEndpoint", h), 200)

    # Agents, versions, runs.
    agent = await _expect(w.call("POST /v1/agents", {}, {
        "name": "linked", "model": "scripted", "system_prompt": "Be brief."}, h), 201)
    await _expect(w.follow(agent, "GetAgent", h), 200)
    await _expect(w.follow(agent, "GetVersion", h), 200)
    version = await _expect(w.follow(agent, "NewVersion", h, body={
        "model": "scripted", "system_prompt": "Be briefer."}), 201)
    await _expect(w.follow(version, "GetVersion", h), 200)
    await _expect(w.follow(version, "Promote", h), 200)
    run = await _expect(w.follow(agent, "StartRun", h), 202)
    for name in ("GetRun", "RunTrace", "RunChildren"):
        await _expect(w.follow(run, name, h), 200)
    await _expect(w.follow(run, "RunEvents", {**h, "Accept": "application/json"}), 200)
    cancelled = await _expect(w.follow(run, "CancelRun", h), 200)
    await _expect(w.follow(cancelled, "GetRun", h), 200)
    deleted = await _expect(w.follow(cancelled, "DeleteRun", h), 204)
    await _expect(w.follow(deleted, "GetTombstone", h), 200)
    await _expect(w.follow(run, "GetRun", h), 404)  # deleted: gone
    test_set = await _expect(w.follow(agent, "CreateTestSet", h, body={
        "name": "smoke", "cases": [{"input": "hi"}]}), 201)
    await _expect(w.follow(test_set, "GetTestSet", h), 200)
    evaluation = await _expect(w.follow(test_set, "Evaluate", h), 201)
    await _expect(w.follow(evaluation, "GetEvaluation", h), 200)

    # Activities and their tasks.
    code = {"entrypoint": "main.py:handle", "files": {
        "main.py": base64.b64encode(b"def handle(v, c):\n    return v\n").decode()}}
    activity = await _expect(w.call("POST /v1/activities", {}, {"name": "echo", **code}, h),
                             201)
    await _expect(w.follow(activity, "GetActivity", h), 200)
    await _expect(w.follow(activity, "GetActivityVersion", h), 200)
    later = await _expect(w.follow(activity, "NewActivityVersion", h, body=code), 201)
    task = await _expect(w.follow(later, "EnqueueTask", h), 202)
    await _expect(w.follow(activity, "EnqueueTask", h), 202)
    await _expect(w.follow(later, "GetActivity", h), 200)
    await _expect(w.follow(later, "GetActivityVersion", h), 200)
    await _expect(w.follow(later, "NewActivityVersion", h, body=code), 201)
    for name in ("GetTask", "TaskAttempts"):
        await _expect(w.follow(task, name, h), 200)
    await _expect(w.follow(task, "CancelTask", h), 200)

    # The tenant's own keys.
    made = await _expect(w.call("POST /v1/api-keys", {}, {"scopes": ["runs:read"]}, h), 201)
    await _expect(w.follow(made, "GetKey", h), 200)
    rotated = await _expect(w.call("POST /v1/api-keys/{key_id}/rotate",
                                   {"key_id": made.body["key_id"]}, None, h), 201)
    await _expect(w.follow(rotated, "GetKey", h), 200)
    await _expect(w.follow(made, "GetKey", h), 404)  # rotated with no overlap: revoked
    await _expect(w.follow(made, "RevokeKey", h), 200)

    # An export: read back, its archive not there yet (no exporter runs here).
    export = await _expect(w.call("POST /v1/exports", {}, None, h), 202)
    await _expect(w.follow(export, "GetExport", h), 200)
    await _expect(w.follow(export, "ExportArchive", h), 404)

    # Erasure, last: it revokes the tenant's keys.
    job = await _expect(w.follow(tenant, "EraseTenant", op), 202)
    await _expect(w.follow(job, "GetEraseJob", op), 200)

    assert w.followed == _linked(doc), sorted(_linked(doc) - w.followed)
