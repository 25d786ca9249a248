"""Our own faults are not described to tenants. A provider whose error
body names an internal host, and a platform fault whose exception does, reach the tenant
(GET /v1/runs/{id}, the event stream) only as a stable message and an error id; our log
holds the detail under the same id."""

from __future__ import annotations

import json
import logging
import re
from collections.abc import AsyncIterator
from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from tenantry.models.loopback import LoopbackServer
from tests.support.api import Api
from tests.support.faults import INTERNAL, BrokenTools
from tests.support.waiting import until
from tests.support.worker import Fakes, running_worker

ERROR_ID = re.compile(r"err_[0-9a-f]{16}")


class LeakyProvider:
    """An OpenAI-compatible endpoint that only ever fails, naming its internals."""

    def __init__(self, status: int) -> None:
        self.status = status
        self.server = LoopbackServer(Starlette(routes=[
            Route("/v1/chat/completions", self.chat, methods=["POST"]),
            Route("/v1/models", self.chat, methods=["GET"])]))

    async def chat(self, request: Request) -> Response:
        return JSONResponse({"error": {
            "message": f"upstream connect error: https://{INTERNAL}/v1 refused (pool db-3)",
            "type": "server_error"}}, status_code=self.status)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server.port}/v1"


@pytest.fixture(params=[503, 400])
async def leaky(request: pytest.FixtureRequest) -> AsyncIterator[LeakyProvider]:
    provider = LeakyProvider(request.param)
    await provider.server.start()
    yield provider
    await provider.server.stop()


def _logged(caplog: pytest.LogCaptureFixture, error_id: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if getattr(r, "error_id", None) == error_id]


async def _events(api: Api, h: dict[str, str], run_id: str) -> list[dict[str, Any]]:
    page = await api.client.get(f"/v1/runs/{run_id}/events",
                                headers={**h, "Accept": "application/json"})
    events: list[dict[str, Any]] = page.json()["events"]
    return events


async def test_a_providers_internal_error_text_reaches_only_our_log(
    api: Api, database_dsn: str, leaky: LeakyProvider, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    await api.model_account("leaky", leaky.base_url, models=["scripted"])
    _, h = await api.tenant()
    agent = await api.agent(h)
    kind = "RunParked" if leaky.status == 503 else "RunFailed"
    async with running_worker(database_dsn, None):
        run_id = await api.start(h, agent, "hello")
        seen: list[dict[str, Any]] = []

        async def told() -> bool:
            seen[:] = [e for e in await _events(api, h, run_id) if e["type"] == kind]
            return bool(seen)

        await until(told, f"{kind} recorded", 30)
        run = await api.run(h, run_id)
        stream = await _events(api, h, run_id)
    shown = json.dumps(run) + json.dumps(stream)
    for secret in ("corp.internal", "upstream", "db-3", "127.0.0.1"):
        assert secret not in shown
    data = seen[0]["data"]
    text = data["reason"] if kind == "RunParked" else data["error"]
    [error_id] = ERROR_ID.findall(text)
    assert data["error_id"] == error_id
    if kind == "RunFailed":
        assert run["error"]["error_id"] == error_id and run["error"]["ours"] is False
        assert text.startswith("the model provider refused the request (HTTP 400;")
    else:
        assert text.startswith("model unavailable: no account could serve scripted now")
    # The operator greps the id and finds the provider's own words.
    assert any(INTERNAL in r.getMessage() for r in _logged(caplog, error_id))


async def test_a_platform_fault_is_an_error_id_to_the_tenant_and_a_traceback_to_us(
    api: Api, fakes: Fakes, database_dsn: str, caplog: pytest.LogCaptureFixture
) -> None:
    _, h = await api.tenant()
    agent = await api.agent(h)
    async with running_worker(database_dsn, fakes.model.base_url, gateway=BrokenTools):
        run_id = await api.start(h, agent, "hello")
        events = await api.events_until_end(h, run_id)
        run = await api.run(h, run_id)
    failed = events[-1]
    assert failed["type"] == "RunFailed" and failed["data"]["ours"] is True
    shown = json.dumps(run) + json.dumps(events)
    for secret in ("corp.internal", "postgres", "RuntimeError", "cell-eu-2"):
        assert secret not in shown
    [error_id] = ERROR_ID.findall(failed["data"]["error"])
    assert failed["data"]["error_id"] == error_id
    assert run["error"] == {"message": failed["data"]["error"], "ours": True,
                            "error_id": error_id}
    [record] = _logged(caplog, error_id)
    assert INTERNAL in record.getMessage() and record.exc_info is not None
