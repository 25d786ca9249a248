"""Schemathesis over the published /openapi.json, against the real app on loopback: every
documented operation of the tenant API (a tenant key) and of the operator API (the
operator token), with inputs the document allows and inputs it forbids. Nothing may answer
5xx, and every answer must be one the document declares: its status, its content type, its
body's schema and its declared headers.

The app runs in a thread of its own (uvicorn with its own event loop) because Schemathesis
calls it synchronously. About half the cases keep their generated path parameters
(ill-formed and unknown ids); the other half name real objects created first (a tenant,
a spare key, an agent, a run, a secret, a tool server, a model account, an activity
and its task), so the lookups that find something, and what they answer, are fuzzed
too.

Nothing is excluded. Two choices are stated where they are made: unknown query parameters
are not sent as "invalid" input (the API ignores them, as docs/reference/api.md says; only
unknown body fields are refused), and one 5xx is accepted, the 502 ``tool_unavailable``
the document declares when a well-formed tool-server URL has no MCP server behind it
(``_no_server_error``). The event stream is read as Schemathesis reads any stream (until
it ends or the request timeout); the real run it names has ended, so it ends."""

from __future__ import annotations

import asyncio
import base64
import threading
import uuid
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import asyncpg
import httpx2
import pytest
import schemathesis
import uvicorn
from schemathesis import Case
from schemathesis.checks import not_a_server_error
from schemathesis.config import HealthCheck
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    negative_data_rejection,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from tenantry.bootstrap.api import build_app
from tenantry.config import Settings
from tenantry.testing.mcp_server import EffectsMcpServer
from tests.support.api import OPERATOR_TOKEN, TEST_MASTER_KEY, free_port
from tests.support.db import dsn_for

#: Examples per operation and pass: the whole module stays around a minute on 2 cores.
MAX_EXAMPLES = 15
SEED = 1313


@dataclass
class Served:
    """The app on loopback, and the real objects its path parameters can name."""

    base_url: str
    tenant_key: str
    real: dict[str, str]  # path parameter name -> the id of an existing object


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


def _create_objects(base_url: str, mcp_url: str) -> Served:
    """One of each object a path can name, through the API itself."""
    op = {"Authorization": f"Bearer {OPERATOR_TOKEN}"}
    with httpx2.Client(base_url=base_url, timeout=10) as c:
        def ok(r: httpx2.Response) -> dict[str, Any]:
            assert r.status_code < 300, r.text
            body: dict[str, Any] = r.json()
            return body

        tenant = ok(c.post("/admin/v1/tenants", json={"name": "Fuzzed", "tenant_id": "fuzzed"},
                           headers=op))["tenant_id"]
        key = ok(c.post(f"/admin/v1/tenants/{tenant}/api-keys", headers=op))
        h = {"Authorization": f"Bearer {key['api_key']}"}
        spare = ok(c.post(f"/admin/v1/tenants/{tenant}/api-keys", headers=op))["key_id"]
        ok(c.put(f"/admin/v1/tenants/{tenant}/secrets/crm-token", json={"value": "s3cret"},
                 headers=op))
        ok(c.post(f"/admin/v1/tenants/{tenant}/tool-servers", headers=op, json={
            "name": "effects", "url": mcp_url, "honours_idempotency_keys": True}))
        account = ok(c.post("/admin/v1/model-accounts", headers=op, json={
            "account_id": "fuzz-acct", "provider": "openai", "base_url": "http://127.0.0.1:9/v1",
            "models": ["scripted"], "region": "us"}))["account_id"]
        agent = ok(c.post("/v1/agents", headers=h, json={
            "name": "fuzzed", "model": "scripted", "system_prompt": "Be brief."}))["agent_id"]
        run = ok(c.post("/v1/runs", headers=h, json={"agent_id": agent, "input": "hi"}))
        # Ended, so its event stream closes once read (a live one stays open by design).
        ok(c.post(f"/v1/runs/{run['run_id']}/cancel", headers=h))
        # An activity named like the tool server, so `{name}` finds either.
        ok(c.post("/v1/activities", headers=h, json={
            "name": "effects", "entrypoint": "main.py:handle",
            "files": {"main.py": base64.b64encode(b"def handle(v, c):\n    return v\n")
                      .decode()}}))
        task = ok(c.post("/v1/activity-tasks", headers=h, json={"activity": "effects"}))
        return Served(base_url, key["api_key"], {
            "tenant_id": tenant, "key_id": spare, "name": "effects", "agent_id": agent,
            "version": "1", "run_id": run["run_id"], "account_id": account,
            "task_id": task["task_id"],
        })


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


def _schema(path_regex: str) -> Any:
    schema = schemathesis.openapi.from_dict(DOCUMENT)
    schema.config.update(request_timeout=5)
    # allow_extra_parameters=False: an unknown query parameter is not invalid input here.
    # with_security_parameters=False: every call carries the credentials its operation
    # checks (a case that "drops" the Authorization header would get it back from the
    # caller and be judged as accepted); missing and wrong credentials have their own
    # tests (test_operator_lists, test_api_tenants_agents, test_openapi).
    schema.config.generation.update(max_examples=MAX_EXAMPLES, deterministic=True,
                                    database="none", allow_extra_parameters=False,
                                    with_security_parameters=False)
    schema.config.seed = SEED
    schema.config.suppress_health_check = [HealthCheck.all]
    return schema.include(path_regex=path_regex)


tenant_api = _schema(r"^/(v1/|healthz$)")
operator_api = _schema(r"^/(admin/v1/|metrics$)")

#: The operations that call the URL they are given (or the one registered) over MCP.
_CALLS_A_TOOL_SERVER = {"/admin/v1/tenants/{tenant_id}/tool-servers",
                        "/admin/v1/tenants/{tenant_id}/tool-servers/{name}/pin"}


def _no_server_error(ctx: Any, response: Any, case: Case) -> bool | None:
    """``not_a_server_error``, but for the one documented upstream failure: a generated URL
    such as ``http://0`` is well formed, and nothing behind it answers tools/list."""
    if (response.status_code == 502 and case.operation.path in _CALLS_A_TOOL_SERVER
            and response.json().get("type") == "tool_unavailable"):
        return None
    result: bool | None = not_a_server_error(ctx, response, case)
    return result


def _rejected(ctx: Any, response: Any, case: Case) -> bool | None:
    """``negative_data_rejection``, counting a 413 as the refusal it is: an invalid body can
    also be a huge one (an array past its maxItems of large items), and the body limit
    refuses it before validation does. Nothing is written either way."""
    if response.status_code == 413 and response.json().get("type") == "payload_too_large":
        return None
    result: bool | None = negative_data_rejection(ctx, response, case)
    return result


CHECKS = [_no_server_error, status_code_conformance, content_type_conformance,
          response_schema_conformance, response_headers_conformance, _rejected]


def _on_real_objects(case: Case, served: Served) -> None:
    """About half the cases (chosen by the case itself, so runs repeat) name real objects."""
    if not case.path_parameters or zlib.crc32(repr(case.path_parameters).encode()) % 2 == 0:
        return
    # Assigned, not mutated: Schemathesis then re-judges whether the case is still invalid.
    case.path_parameters = {name: served.real.get(name, value)
                            for name, value in case.path_parameters.items()}


def _check(case: Case, served: Served, token: str) -> None:
    _on_real_objects(case, served)
    case.call_and_validate(base_url=served.base_url, checks=CHECKS,
                           headers={"Authorization": f"Bearer {token}"})


@tenant_api.parametrize()
def test_tenant_api_conforms_to_its_document(case: Case, served: Served) -> None:
    _check(case, served, served.tenant_key)


@operator_api.parametrize()
def test_operator_api_conforms_to_its_document(case: Case, served: Served) -> None:
    _check(case, served, OPERATOR_TOKEN)
