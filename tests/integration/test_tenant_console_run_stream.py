"""The tenant console's run page follows the run live (issue 41): its event stream
(``/app/runs/{run_id}/events``, SSE) and its changing parts as a fragment (``…/live``), for
the signed-in person's own tenant only, the stream counted against that tenant's stream
slots and ending with the run. The browser's view of it is
tests/e2e/test_tenant_console.py."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

import httpx2
import orjson

from tests.support.api import Api, serving_api
from tests.support.console import waiting_run
from tests.support.tenant_console import person
from tests.support.waiting import until
from tests.support.worker import Fakes


@dataclass(slots=True)
class _Opened:
    response: httpx2.Response
    lines: AsyncIterator[str]

    async def event(self) -> dict[str, object] | None:
        """The stream's next event; None when the server ended the stream."""
        async for line in self.lines:
            if line.startswith("data: "):
                found: dict[str, object] = orjson.loads(line[6:])
                return found
        return None


@asynccontextmanager
async def _stream(api: Api, url: str, headers: dict[str, str]) -> AsyncIterator[_Opened]:
    """The stream's answer, its events read one by one through one iterator over its
    lines, held to the end: an iterator dropped half-read closes the connection when it
    is collected (and the server gives the stream's slot back)."""
    async with api.client.stream("GET", url, headers=headers, timeout=30) as r:
        if r.status_code != 200:
            await r.aread()
        yield _Opened(r, r.aiter_lines())


async def test_the_events_stream_the_persons_own_run_only(api: Api) -> None:
    tenant, a = await api.tenant("A")
    _, b = await api.tenant("B")
    # No worker here: the runs stay queued and their streams open.
    mine = await api.start(a, await api.agent(a), "a's question")
    theirs = await api.start(b, await api.agent(b), "b's question")
    ada = await person(api, a, "ada@a.example", "viewer")

    page = await api.client.get(f"/app/runs/{mine}", headers=ada.headers)
    assert page.status_code == 200
    assert f'data-stream="/app/runs/{mine}/events"' in page.text
    assert f'data-fragment="/app/runs/{mine}/live"' in page.text
    assert '<script src="/app/static/console.js" defer></script>' in page.text
    csp = page.headers["content-security-policy"]
    assert "script-src 'self'" in csp and "connect-src 'self'" in csp
    assert "<script>" not in page.text  # nothing inline

    async with _stream(api, f"/app/runs/{mine}/events", ada.headers) as opened:
        assert opened.response.status_code == 200
        assert opened.response.headers["content-type"].startswith("text/event-stream")
        first = await opened.event()
        assert first is not None and (first["seq"], first["type"]) == (1, "RunCreated")
        # Counted against the tenant's own streams, as its API key's stream is.
        assert api.platform.streams.held_by(tenant) == 1
    await until(lambda: _held(api, tenant, 0), "the closed stream's slot is back", 10)

    # Another tenant's run is no run at all; so is a run id that is none.
    answers = [await api.client.get(f"/app/runs/{run}/events", headers=ada.headers)
               for run in (theirs, "run_" + "0" * 32, "nope")]
    assert [r.status_code for r in answers] == [404, 404, 404]
    assert answers[0].text == answers[1].text and theirs not in answers[0].text
    live = await api.client.get(f"/app/runs/{theirs}/live", headers=ada.headers)
    assert live.status_code == 404 and theirs not in live.text
    assert api.platform.streams.open == 0

    # Without a session (or with one that is no longer): signed out, nothing streamed.
    for headers in ({}, {"Cookie": "tenantry_app=forged"}):
        for url in (f"/app/runs/{mine}/events", f"/app/runs/{mine}/live"):
            r = await api.client.get(url, headers=headers)
            assert r.status_code == 401, url
            assert not r.headers["content-type"].startswith("text/event-stream")
            assert "a&#39;s question" not in r.text


async def _held(api: Api, tenant: str, n: int) -> bool:
    return api.platform.streams.held_by(tenant) == n


async def test_a_tenant_at_its_stream_cap_gets_no_console_stream(database_dsn: str) -> None:
    async with serving_api(database_dsn, sse_max_streams=100,
                           sse_max_streams_per_tenant=1) as api:
        _, a = await api.tenant("Busy")
        _, b = await api.tenant("Idle")
        run_a = await api.start(a, await api.agent(a), "x")
        run_b = await api.start(b, await api.agent(b), "y")
        ada = await person(api, a, "ada@busy.example", "viewer")
        bob = await person(api, b, "bob@idle.example", "viewer")
        # The tenant's one stream is held by its API key: the person's page gets none...
        async with _stream(api, f"/v1/runs/{run_a}/events", a) as held:
            assert held.response.status_code == 200 and await held.event() is not None
            async with _stream(api, f"/app/runs/{run_a}/events", ada.headers) as refused:
                assert refused.response.status_code == 429
                assert int(refused.response.headers["retry-after"]) >= 1
            # ...while another tenant's person still streams.
            async with _stream(api, f"/app/runs/{run_b}/events", bob.headers) as other:
                assert other.response.status_code == 200
                assert await other.event() is not None


async def test_a_waiting_runs_fragment_decides_and_the_stream_ends_with_the_run(
    api: Api, fakes: Fakes, worker: object,
) -> None:
    _, h, run_id, approval_id = await waiting_run(api, fakes)
    ann = await person(api, h, "ann@acme.example", "approver")
    live = await api.client.get(f"/app/runs/{run_id}/live", headers=ann.headers)
    assert live.status_code == 200
    assert 'id="run-status" class="status s-waiting"' in live.text
    # The fragment replaces the page's approval card: its form carries the session's token.
    form = re.search(rf'<form method="post" action="/app/approvals/{approval_id}" '
                     r'class="decide">\s*<input type="hidden" name="csrf" value="([^"]*)">',
                     live.text)
    assert form is not None and form[1] == ann.csrf

    async with asyncio.timeout(30), \
            _stream(api, f"/app/runs/{run_id}/events", ann.headers) as opened:
        first = await opened.event()
        assert first is not None and first["type"] == "RunCreated"
        decided = await api.client.post(f"/app/approvals/{approval_id}", headers=ann.headers,
                                        data={"csrf": form[1], "back": "run",
                                              "decision": "approve"})
        assert decided.status_code == 303
        assert decided.headers["location"] == f"/app/runs/{run_id}"
        # The stream follows the run to its end, and then ends.
        types: list[object] = []
        while (event := await opened.event()) is not None:
            types.append(event["type"])
    assert types[-1] == "RunFinished" and "ApprovalDecided" in types
    done = await api.client.get(f"/app/runs/{run_id}/live", headers=ann.headers)
    assert 'id="run-status" class="status s-finished"' in done.text
    assert "form" not in done.text.split('data-part="approvals"')[1].split("</section>")[0]
