"""Schemathesis over the published /openapi.json, against the real app on loopback, with
every check it has (the pytest form of ``--checks all``): every documented operation of
the tenant API (a tenant key) and of the operator API (the operator token), with inputs
the document allows and inputs it forbids, then a stateful run that follows the
document's links (create an agent, then read and version it; start a run, then read,
cancel, stream and delete it, and read it after; ...).

Nothing may answer 5xx unless the document says the operation can: the 502 of the three
operations that call a server they are given (a tool server's URL, a provider's report
endpoint), which ``schemathesis.toml`` names. Every answer must be one the document
declares (its status, content type, body and headers); a valid request must be accepted
and an invalid one refused (an unknown query parameter is not refused: the API ignores
them, as docs/reference/api.md says, and Schemathesis does not count that as accepting
invalid data); a method the document does not list must be answered 405 with an ``Allow``
naming exactly the ones it does; credentials are enforced; what was just created can be
read and what was deleted cannot.

The app runs in a thread of its own (uvicorn with its own event loop) because Schemathesis
calls it synchronously. About half the cases keep their generated path parameters
(ill-formed and unknown ids); the other half name real objects created first, so the
lookups that find something, and what they answer, are fuzzed too. The tenant API's
objects belong to one tenant and the operator API's to another: the operator fuzzing
(which pauses, re-prices and erases what it is given) cannot take the tenant key away.

The configuration both this module and the CLI use is ``schemathesis.toml`` at the
repository root (docs/reference/api.md, "Conformance", has the CLI command); the rules
the document states in prose but JSON Schema cannot (one field relative to another) are
taught to the generator by ``tests/support/conformance.py``, which that file names."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import threading
import uuid
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncpg
import httpx2
import hypothesis
import pytest
import schemathesis
import uvicorn
from schemathesis import Case
from schemathesis.checks import CheckContext
from schemathesis.config import HealthCheck, SchemathesisConfig
from schemathesis.core.failures import FailureGroup
from schemathesis.generation.stateful.state_machine import StepInput, StepOutput
from schemathesis.specs.openapi.checks import ignored_auth

from tenantry.bootstrap.api import build_app
from tenantry.config import Settings
from tenantry.testing.mcp_server import EffectsMcpServer
from tests.support.api import OPERATOR_TOKEN, TEST_MASTER_KEY, free_port
from tests.support.db import dsn_for

#: Examples per operation and pass, and the stateful run's size: the module stays within
#: a few minutes on 2 cores.
MAX_EXAMPLES = 10
STATEFUL_MAX_SUITES = 10
STATEFUL_SCENARIOS = 20
STATEFUL_STEPS = 12
SEED = 1313
CONFIG_FILE = Path(__file__).resolve().parents[2] / "schemathesis.toml"


@dataclass
class Served:
    """The app on loopback, and the real objects its path parameters can name."""

    base_url: str
    tenant_key: str
    tenant_real: dict[str, str]  # path parameter name -> an existing object, tenant API
    operator_real: dict[str, str]  # the same for the operator API (another tenant)

    def auth(self, path: str) -> dict[str, str]:
        operator = path.startswith(("/admin/", "/metrics"))
        return {"Authorization": f"Bearer {OPERATOR_TOKEN if operator else self.tenant_key}"}


class _ServerThread:
    """A fresh database (from the session's template), an MCP server and the app, all on
    one event loop in a thread of their own."""

    def __init__(self, admin_dsn: str, template: str) -> None:
        self.admin_dsn = admin_dsn
        self.template = template
        self.port = free_port()
        self.mcp_url = ""
        self.ready = threading.Event()
        self.failed: BaseException | None = None
        self.server: uvicorn.Server | None = None
        self.thread = threading.Thread(target=self._run, name="fuzzed-api", daemon=True)

    def __enter__(self) -> _ServerThread:
        self.thread.start()
        if not self.ready.wait(60) or self.failed is not None:
            raise RuntimeError(f"the API did not start: {self.failed!r}")
        return self

    def __exit__(self, *_: object) -> None:
        assert self.server is not None
        self.server.should_exit = True
        self.thread.join(60)

    def _run(self) -> None:
        try:
            asyncio.run(self._serve())
        except BaseException as exc:  # reported to the test thread, which raises it
            self.failed = exc
            self.ready.set()

    async def _serve(self) -> None:
        name = f"tenantry_fuzz_{uuid.uuid4().hex[:12]}"
        admin = await asyncpg.connect(self.admin_dsn)
        await admin.execute(f'CREATE DATABASE "{name}" TEMPLATE "{self.template}"')
        dsn = dsn_for(self.admin_dsn, name)
        try:
            async with EffectsMcpServer() as mcp:
                self.mcp_url = mcp.url
                settings = Settings(
                    database_url=dsn, operator_token=OPERATOR_TOKEN, db_pool_min=1,
                    db_pool_max=5,
                    master_key=TEST_MASTER_KEY.encoded())
                config = uvicorn.Config(build_app(settings, dsn), host="127.0.0.1",
                                        port=self.port, log_config=None, access_log=False,
                                        lifespan="on")
                self.server = uvicorn.Server(config)
                task = asyncio.create_task(self.server.serve())
                while not self.server.started:
                    if task.done():
                        task.result()
                    await asyncio.sleep(0.01)
                self.ready.set()
                await task
        finally:
            await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            await admin.close()


def _ok(r: httpx2.Response) -> dict[str, Any]:
    assert r.status_code < 300, r.text
    body: dict[str, Any] = r.json()
    return body


def _tenant_objects(c: httpx2.Client, tenant_id: str, mcp_url: str) -> tuple[str, dict[str, str]]:
    """A tenant with one of each object a path can name; its API key and those objects."""
    op = {"Authorization": f"Bearer {OPERATOR_TOKEN}"}
    tenant = _ok(c.post("/admin/v1/tenants", json={"name": "Fuzzed", "tenant_id": tenant_id},
                        headers=op))["tenant_id"]
    key = _ok(c.post(f"/admin/v1/tenants/{tenant}/api-keys", headers=op))
    h = {"Authorization": f"Bearer {key['api_key']}"}
    spare = _ok(c.post(f"/admin/v1/tenants/{tenant}/api-keys", headers=op))["key_id"]
    _ok(c.put(f"/admin/v1/tenants/{tenant}/secrets/crm-token", json={"value": "s3cret"},
              headers=op))
    _ok(c.post(f"/admin/v1/tenants/{tenant}/tool-servers", headers=op, json={
        "name": "effects", "url": mcp_url, "honours_idempotency_keys": True}))
    agent = _ok(c.post("/v1/agents", headers=h, json={
        "name": "fuzzed", "model": "scripted", "system_prompt": "Be brief."}))["agent_id"]
    run = _ok(c.post("/v1/runs", headers=h, json={"agent_id": agent, "input": "hi"}))
    # Ended, so its event stream closes once read (a live one stays open by design).
    _ok(c.post(f"/v1/runs/{run['run_id']}/cancel", headers=h))
    # An activity named like the tool server, so `{name}` finds either.
    _ok(c.post("/v1/activities", headers=h, json={
        "name": "effects", "entrypoint": "main.py:handle",
        "files": {"main.py": base64.b64encode(b"def handle(v, c):\n    return v\n").decode()}}))
    task = _ok(c.post("/v1/activity-tasks", headers=h, json={"activity": "effects"}))
    # The tenant's own model account (registered for it: the tenant's own route refuses a
    # loopback URL under the default rules this app has).
    account = _ok(c.post(f"/admin/v1/tenants/{tenant}/model-accounts", headers=op, json={
        "provider": "openai", "base_url": "http://127.0.0.1:9/v1", "models": ["scripted"],
        "region": "us", "secret_name": "crm-token"}))["account_id"]
    # Queued (no exporter runs here): its archive answers 404 until ready.
    export = _ok(c.post("/v1/exports", headers=h))
    return key["api_key"], {
        "tenant_id": tenant, "key_id": spare, "name": "effects", "agent_id": agent,
        "version": "1", "run_id": run["run_id"], "task_id": task["task_id"],
        "account_id": account, "export_id": export["export_id"],
    }


def _create_objects(base_url: str, mcp_url: str) -> Served:
    """The tenant API's objects (its tenant's key is the one fuzzed) and the operator API's
    (another tenant's, and a platform model account), through the API itself."""
    op = {"Authorization": f"Bearer {OPERATOR_TOKEN}"}
    with httpx2.Client(base_url=base_url, timeout=10) as c:
        key, tenant_real = _tenant_objects(c, "fuzzed", mcp_url)
        _, operator_real = _tenant_objects(c, "fuzzed-by-operator", mcp_url)
        operator_real["account_id"] = _ok(c.post("/admin/v1/model-accounts", headers=op, json={
            "account_id": "fuzz-acct", "provider": "openai", "base_url": "http://127.0.0.1:9/v1",
            "models": ["scripted"], "region": "us"}))["account_id"]
    return Served(base_url, key, tenant_real, operator_real)


@pytest.fixture(scope="module")
def served(admin_dsn: str, template_db: str) -> Iterator[Served]:
    with _ServerThread(admin_dsn, template_db) as thread:
        base_url = f"http://127.0.0.1:{thread.port}"
        published = httpx2.get(f"{base_url}/openapi.json", timeout=10).json()
        assert published == DOCUMENT, "the fuzzed document is not the one the app serves"
        yield _create_objects(base_url, thread.mcp_url)


def _document() -> dict[str, Any]:
    """The document the app publishes, built without a database so the tests can be
    generated at collection; ``served`` checks the live /openapi.json is this document.
    (Schemathesis 4.32's lazy loader, ``schemathesis.pytest.from_fixture``, fails under
    pytest 9: it sets ``request.node._nodeid``, which pytest no longer has.)"""
    settings = Settings(operator_token=OPERATOR_TOKEN)
    doc: dict[str, Any] = build_app(settings, "postgresql://unused").openapi()
    return doc


DOCUMENT = _document()


def _schema(leave_out: str | None = None) -> Any:
    """The document's operations but those whose path matches ``leave_out`` (excluded, not
    the others included: the configuration's per-operation section is an include of its
    own, and includes add up)."""
    schema = schemathesis.openapi.from_dict(DOCUMENT,
                                            config=SchemathesisConfig.from_path(CONFIG_FILE))
    schema.config.update(request_timeout=5)
    # with_security_parameters=False: every call carries the credentials its operation
    # checks (the test passes them), and `ignored_auth` probes each operation without
    # them and with wrong ones.
    schema.config.generation.update(max_examples=MAX_EXAMPLES, deterministic=True,
                                    database="none", with_security_parameters=False)
    schema.config.seed = SEED
    schema.config.suppress_health_check = [HealthCheck.all]
    return schema if leave_out is None else schema.exclude(path_regex=leave_out)


TENANT_PATHS = r"^/(v1/|healthz$)"
OPERATOR_PATHS = r"^/(admin/v1/|metrics$)"
#: Left out of the operator fuzz: a rotation with any overlap it picks ends the very token
#: the fuzz calls with (tests/integration/test_operators.py tests it, bad input too).
TOKEN_ROTATION = r"^/admin/v1/operator-token/"
tenant_api = _schema(leave_out=OPERATOR_PATHS)
operator_api = _schema(leave_out=f"{TENANT_PATHS}|{TOKEN_ROTATION}")


#: Operations shown to refuse missing and wrong credentials (ignored_auth's probes).
_AUTH_ENFORCED: set[str] = set()


def _ignored_auth(ctx: CheckContext, response: Any, case: Case) -> bool | None:
    """``ignored_auth`` as Schemathesis's engine runs it: an operation confirmed to refuse a
    request without credentials, and one with wrong ones, is not probed again in the run
    (the pytest path starts each case with no memory of it, and probes twice per 2xx)."""
    ctx.auth_enforced_operations = _AUTH_ENFORCED
    result: bool | None = ignored_auth(ctx, response, case)
    return result


def _call_and_validate(case: Case, served: Served) -> None:
    case.call_and_validate(base_url=served.base_url, headers=served.auth(case.path),
                           excluded_checks=[ignored_auth], additional_checks=[_ignored_auth])


def _on_real_objects(case: Case, real: dict[str, str]) -> None:
    """About half the cases (chosen by the case itself, so runs repeat) name real objects."""
    if not case.path_parameters or zlib.crc32(repr(case.path_parameters).encode()) % 2 == 0:
        return
    # Assigned, not mutated: Schemathesis then re-judges whether the case is still invalid.
    case.path_parameters = {name: real.get(name, value)
                            for name, value in case.path_parameters.items()}


@tenant_api.parametrize()
def test_tenant_api_conforms_to_its_document(case: Case, served: Served) -> None:
    _on_real_objects(case, served.tenant_real)
    _call_and_validate(case, served)


@operator_api.parametrize()
def test_operator_api_conforms_to_its_document(case: Case, served: Served) -> None:
    _on_real_objects(case, served.operator_real)
    _call_and_validate(case, served)


@dataclass(frozen=True)
class Journey:
    """The operations of one resource's life, links a run of them is sure to follow (that
    each link leads where it says is test_openapi's, call by call), and how many calls it
    may make (its answers' probes aside)."""

    operations: frozenset[str]
    must_follow: frozenset[tuple[str, str]]
    calls: int


JOURNEYS = {
    "runs": Journey(
        frozenset({"POST /v1/agents", "POST /v1/runs", "GET /v1/runs/{run_id}",
                   "GET /v1/runs/{run_id}/events", "POST /v1/runs/{run_id}/cancel"}),
        frozenset({("POST /v1/agents", "POST /v1/runs"),
                   ("POST /v1/runs", "POST /v1/runs/{run_id}/cancel")}),
        calls=60),
    # A run deleted, then read again (use_after_free: it is gone) or its tombstone read.
    "run deletion": Journey(
        frozenset({"POST /v1/agents", "POST /v1/runs", "POST /v1/runs/{run_id}/cancel",
                   "GET /v1/runs/{run_id}", "DELETE /v1/runs/{run_id}",
                   "GET /v1/tombstones/{run_id}"}),
        frozenset({("POST /v1/runs", "POST /v1/runs/{run_id}/cancel"),
                   ("POST /v1/runs/{run_id}/cancel", "DELETE /v1/runs/{run_id}")}),
        calls=100),
    "agents": Journey(
        frozenset({"POST /v1/agents", "GET /v1/agents/{agent_id}",
                   "POST /v1/agents/{agent_id}/versions",
                   "GET /v1/agents/{agent_id}/versions/{version}",
                   "POST /v1/agents/{agent_id}/promote",
                   "POST /v1/agents/{agent_id}/test-sets",
                   "GET /v1/agents/{agent_id}/test-sets/{test_set_id}"}),
        frozenset({("POST /v1/agents", "GET /v1/agents/{agent_id}"),
                   ("POST /v1/agents", "POST /v1/agents/{agent_id}/versions")}),
        calls=60),
    "activities": Journey(
        frozenset({"POST /v1/activities", "GET /v1/activities/{name}",
                   "POST /v1/activities/{name}/versions", "POST /v1/activity-tasks",
                   "GET /v1/activity-tasks/{task_id}",
                   "POST /v1/activity-tasks/{task_id}/cancel"}),
        frozenset({("POST /v1/activities", "POST /v1/activity-tasks")}),
        calls=60),
    "api keys": Journey(
        frozenset({"POST /admin/v1/tenants", "POST /admin/v1/tenants/{tenant_id}/api-keys",
                   "GET /admin/v1/tenants/{tenant_id}/api-keys/{key_id}",
                   "DELETE /admin/v1/tenants/{tenant_id}/api-keys/{key_id}"}),
        frozenset({("POST /admin/v1/tenants", "POST /admin/v1/tenants/{tenant_id}/api-keys"),
                   ("POST /admin/v1/tenants/{tenant_id}/api-keys",
                    "DELETE /admin/v1/tenants/{tenant_id}/api-keys/{key_id}")}),
        calls=40),
    "erasure": Journey(
        frozenset({"POST /admin/v1/tenants", "GET /admin/v1/tenants/{tenant_id}",
                   "POST /admin/v1/tenants/{tenant_id}/erase",
                   "GET /admin/v1/erase-jobs/{job_id}"}),
        frozenset({("POST /admin/v1/tenants", "POST /admin/v1/tenants/{tenant_id}/erase")}),
        calls=40),
    "model accounts": Journey(
        frozenset({"GET /admin/v1/prices", "PUT /admin/v1/prices/{model}",
                   "GET /admin/v1/prices/{model}", "POST /admin/v1/model-accounts",
                   "GET /admin/v1/model-accounts/{account_id}",
                   "DELETE /admin/v1/model-accounts/{account_id}"}),
        frozenset({("GET /admin/v1/prices", "POST /admin/v1/model-accounts")}),
        calls=40),
}


#: Operations whose body names what they create, unique per tenant: a journey that creates
#: one makes it new, or every later creation is a 409 and the journey follows no link from
#: it (Hypothesis shrinks names towards "0").
_NAMED = {"POST /v1/agents", "POST /v1/activities"}


#: Operations that publish an agent version: its models must be priced (422 otherwise),
#: which is the platform's state, as a taken name is; a journey publishes priced ones.
_PUBLISHING = {"POST /v1/agents", "POST /v1/agents/{agent_id}/versions"}


def _named_anew(case: Case, serial: int) -> None:
    body = case.body
    positive = case.meta is not None and case.meta.generation.mode.is_positive
    if positive and case.operation.label in _NAMED and isinstance(body, dict) \
            and isinstance(body.get("name"), str):
        suffix = f"-{serial}"
        case.body = body = {**body, "name": body["name"][:64 - len(suffix)] + suffix}
    if positive and case.operation.label in _PUBLISHING and isinstance(body, dict):
        case.body = {**body, "model": "scripted", "fallback_models": [], "summarize": None}


class _BudgetSpent(BaseException):
    """Ends a suite: a BaseException, so Hypothesis stops at once instead of replaying."""


@pytest.mark.parametrize("journey", sorted(JOURNEYS))
def test_links_hold_across_calls(served: Served, journey: str) -> None:
    """The stateful phase, one resource's life at a time: scenarios that follow the
    document's links from what one call created to the calls that use it, each answer
    checked as above, plus what only a sequence shows (a resource used after its delete,
    one just created not found).

    A scenario's next steps depend on what the server answered before, which Hypothesis's
    replay cannot reproduce (it calls that Flaky): failures are collected as they happen,
    and the run is a few short suites of their own seeds, as Schemathesis's engine runs
    them."""
    plan = JOURNEYS[journey]
    machine = _schema().exclude(
        func=lambda ctx: ctx.operation.label not in plan.operations).as_state_machine()
    failures: list[FailureGroup] = []
    followed: set[tuple[str, str]] = set()  # (source, target) of each link followed
    labels: dict[str, str] = {}  # case id -> operation
    deleted: set[str] = set()  # paths a DELETE answered 2xx for
    read_after_delete: list[tuple[str, int]] = []

    class Scenarios(machine):  # type: ignore[misc, valid-type]
        def get_call_kwargs(self, case: Case) -> dict[str, Any]:
            return {"base_url": served.base_url, "headers": served.auth(case.path)}

        def step(self, input: StepInput) -> StepOutput:
            if len(labels) >= plan.calls:
                raise _BudgetSpent
            labels[input.case.id] = input.case.operation.label
            _named_anew(input.case, len(labels))
            if input.transition is not None and input.is_applied:
                source = labels.get(input.transition.parent_id, "?")
                followed.add((source, input.case.operation.label))
            return super().step(input)  # type: ignore[no-any-return]

        def validate_response(self, response: Any, case: Case, *args: Any,
                              **kwargs: Any) -> None:
            path = case.formatted_path
            if case.method == "DELETE" and 200 <= response.status_code < 300:
                deleted.add(path)
            elif case.method == "GET" and path in deleted:
                read_after_delete.append((path, response.status_code))
            try:
                case.validate_response(response, excluded_checks=[ignored_auth],
                                       additional_checks=[_ignored_auth],
                                       transport_kwargs=kwargs or None, recorder=self.recorder)
            except FailureGroup as group:
                failures.append(group)

    settings = hypothesis.settings(
        max_examples=STATEFUL_SCENARIOS, stateful_step_count=STATEFUL_STEPS,
        phases=[hypothesis.Phase.generate], database=None, deadline=None,
        suppress_health_check=list(hypothesis.HealthCheck))
    for suite in range(STATEFUL_MAX_SUITES):
        if len(labels) >= plan.calls:
            break
        Scenarios.rule_order_seed = SEED + suite
        # Flaky: the server's state moved on; every answer until then was checked.
        with contextlib.suppress(hypothesis.errors.Flaky, _BudgetSpent):
            hypothesis.seed(SEED + suite)(Scenarios).run(settings=settings)
    assert not failures, "\n\n".join(str(group) for group in failures)
    assert plan.must_follow <= followed, sorted(followed)
    # What use_after_free judges within a scenario, over all of them: a deleted resource
    # asked for again is gone.
    assert all(status == 404 for _, status in read_after_delete), read_after_delete
