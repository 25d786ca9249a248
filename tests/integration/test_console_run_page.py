"""A run's console page reads as a whole: the fragment of its changing parts (what the open
page re-fetches as events arrive) and the payloads behind an event's references — a large
tool output in the blob store, a large input in the run's row — read with the operator's
session, only through the run's own log."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tenantry.api.console import epoch, session
from tenantry.db import Database
from tenantry.tools.gateway import ToolGateway
from tenantry.tools.mcp_client import McpToolClient
from tests.support.api import OPERATOR_TOKEN, Api, serving_api
from tests.support.blob_stores import directory_blobs
from tests.support.scripts import answer, call, scripted
from tests.support.worker import Fakes, running_worker

BIG = "0123456789" * 3000  # past the tool output cap: kept in the blob store


def _cookie() -> dict[str, str]:
    cookie, _ = session.issue(OPERATOR_TOKEN, epoch=epoch.FIRST)
    return {"Cookie": f"{session.SESSION_COOKIE}={cookie}"}


async def test_the_live_fragment_and_a_tool_outputs_blob(
    database_dsn: str, db: Database, fakes: Fakes, tmp_path: Path,
) -> None:
    blobs = directory_blobs(db, tmp_path / "blobs")  # the API's store: <data dir>/blobs

    class WithBlobs(ToolGateway):
        def __init__(self, db: Database, mcp: McpToolClient, **kwargs: Any) -> None:
            super().__init__(db, mcp, blobs=blobs, **kwargs)

    async with serving_api(database_dsn, data_dir=tmp_path) as api, running_worker(
            database_dsn, fakes.model.base_url, gateway=WithBlobs):
        tenant, h = await api.tenant()
        await api.tool_server(tenant, fakes.mcp.url)
        agent = await api.agent(h, tools=["echo"])
        run_id = await api.start(h, agent, scripted(call("echo", text=BIG), answer("all read")))
        events = await api.events_until_end(h, run_id)
        base = f"/console/runs/{tenant}/{run_id}"

        live = await api.client.get(f"{base}/live", headers=_cookie())
        assert live.status_code == 200
        assert "<html" not in live.text  # the parts only, not a page
        assert 'id="run-status" class="status s-finished">finished<' in live.text
        assert 'id="run-answer"' in live.text and "all read" in live.text
        assert 'id="run-finished">—<' not in live.text
        assert 'data-part="trace"' in live.text and "table" in live.text
        assert (await api.client.get(f"{base}/live")).status_code == 401
        other = f"/console/runs/{tenant}/run_{'0' * 32}/live"
        assert (await api.client.get(other, headers=_cookie())).status_code == 404

        done = next(e for e in events if e["type"] == "ToolCompleted")
        link = f"{base}/events/{done['seq']}/output_ref"
        page = await api.client.get(base, headers=_cookie())
        assert f'href="{link}"' in page.text  # the event row links its blob
        shown = await api.client.get(link, headers=_cookie())
        assert shown.status_code == 200 and shown.text == BIG
        assert shown.headers["content-type"].startswith("text/plain")
        assert "content-disposition" not in shown.headers
        saved = await api.client.get(link, params={"download": "1"}, headers=_cookie())
        assert saved.content == BIG.encode()
        assert saved.headers["content-disposition"].startswith("attachment;")
        # Only what the log names: another event, another field, another tenant's path.
        for wrong in (f"{base}/events/1/output_ref", f"{base}/events/{done['seq']}/result",
                      f"{base}/events/x/output_ref",
                      f"/console/runs/ten_{'0' * 32}/{run_id}/events/{done['seq']}/output_ref"):
            assert (await api.client.get(wrong, headers=_cookie())).status_code == 404, wrong
        outside = await api.client.get(link)
        assert outside.status_code == 303 and "/console/login" in outside.headers["location"]
        # Gone from the object store (whatever the registry still says): a clear 404,
        # not a 500.
        keys = await blobs.objects.keys(f"{tenant}/")
        assert keys == [f"{tenant}/{done['data']['output_ref']}"]
        for key in keys:
            await blobs.objects.delete(key)
        gone = await api.client.get(link, headers=_cookie())
        assert gone.status_code == 404 and "not in the store" in gone.text


async def test_a_large_input_is_shown_from_the_runs_row(api: Api) -> None:
    tenant, h = await api.tenant()
    agent = await api.agent(h)
    big_input = scripted(answer("ok"), text="x" * 6000)  # past what RunCreated holds inline
    run_id = await api.start(h, agent, big_input)
    base = f"/console/runs/{tenant}/{run_id}"
    page = await api.client.get(base, headers=_cookie())
    assert f'href="{base}/events/1/input_ref"' in page.text
    shown = await api.client.get(f"{base}/events/1/input_ref", headers=_cookie())
    assert shown.status_code == 200 and shown.json() == big_input
