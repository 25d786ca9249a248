"""The built-in browser tools (ADR 0033) with real sandboxes and a real Chromium inside them,
on every backend that runs it: pages come from a real server on loopback that the sandbox
reaches as ``pages.example`` only through its egress relay and the host's proxy
(``tests/support/pages.py``: the proxy's test resolver and connector, never a relaxed
vetting). Containment is checked where a user would notice: what the page server and the
proxy saw, what is in the sandbox and on the host, and what the model was told."""

from __future__ import annotations

import contextlib
import json
import struct
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest

from tenantry.api.console import epoch, session
from tenantry.blobs import BlobKind
from tenantry.bootstrap.worker import browser_policy
from tenantry.db import Database
from tenantry.ids import RunId, TenantId
from tenantry.sandbox import probe as sandbox_probe
from tenantry.sandbox.manager import SandboxManager
from tenantry.sandbox.pool import PooledDriver
from tenantry.sandbox.types import Limits
from tenantry.tools.builtin import BrowserPolicy, BuiltinTools
from tests.support.api import OPERATOR_TOKEN, Api, serving_api
from tests.support.blob_stores import directory_blobs, stored
from tests.support.pages import DOWNLOAD_NAME, HOST, INJECTION, OFF_LIST, PageWorld, page_world
from tests.support.sandbox import require, sandbox_settings
from tests.support.scripts import answer, call, scripted
from tests.support.worker import Fakes, running_worker

pytestmark = pytest.mark.timeout(900)

#: Every backend here runs the browser; bwrap only because the tests allow development
#: backends (a worker refuses it by default: test_bwrap_refuses_the_browser_unless_…).
BROWSER_BACKENDS = ("microvm", "gvisor", "bwrap")
#: What the guest's driver does on its own (schemes, downloads, limits), what the host's
#: proxy refuses and what the gateway does (the allow-list against injected pages) is the
#: same code on every backend; it is checked where a browser starts in a second, not in the
#: ~30 s Chromium takes to start under software emulation here. The microVM runs the
#: end-to-end run: its pages come only through its relay and the proxy, its browser
#: outlives the code's sweep as its own user. (Refusals from inside a microVM are the
#: egress tests', test_egress.py.)
HOST_BROWSER_BACKENDS = ("gvisor", "bwrap")
BROWSER_LIMITS = Limits(memory_mib=1536, pids=256, timeout_s=60)
#: Page loads under software emulation (the microVM here) take seconds, not milliseconds.
POLICY = BrowserPolicy(page_timeout_s=90.0, max_pages=20, allow_dev_backends=True)
PNG = b"\x89PNG\r\n\x1a\n"
#: Prints the user of each of the sandbox's Chromium processes.
BROWSER_OWNERS = ("import os\nfor p in os.listdir('/proc'):\n if p.isdigit():\n  try:\n"
                  "   s = open(f'/proc/{p}/status').read()\n  except OSError:\n   continue\n"
                  "  if 'chromium-headl' in s.split('\\n')[0]:\n"
                  "   print(s.split('Uid:')[1].split()[0])")


@pytest.fixture(scope="module")
def world() -> Iterator[PageWorld]:
    with page_world() as pages:
        yield pages


@dataclass(frozen=True, slots=True)
class BrowserDriver:
    driver: PooledDriver
    folder: Path  # its sandboxes' own folders on the host


@pytest.fixture(scope="module", params=BROWSER_BACKENDS)
async def browser_driver(request: pytest.FixtureRequest, world: PageWorld,
                         tmp_path_factory: pytest.TempPathFactory
                         ) -> AsyncIterator[BrowserDriver]:
    """Browser sandboxes that reach the test's web, one driver per backend and module."""
    async with _driver(request, world, tmp_path_factory) as driver:
        yield driver


@pytest.fixture(scope="module", params=HOST_BROWSER_BACKENDS)
async def host_browser_driver(request: pytest.FixtureRequest, world: PageWorld,
                              tmp_path_factory: pytest.TempPathFactory
                              ) -> AsyncIterator[BrowserDriver]:
    async with _driver(request, world, tmp_path_factory) as driver:
        yield driver


@pytest.fixture
async def browsers(browser_driver: BrowserDriver, db: Database, tmp_path: Path
                   ) -> AsyncIterator[SandboxManager]:
    """A worker's sandbox manager over them; its blobs in <tmp_path>/blobs, their registry
    in the test's database."""
    async with _manager(browser_driver, db, tmp_path) as manager:
        yield manager


@pytest.fixture
async def host_browsers(host_browser_driver: BrowserDriver, db: Database, tmp_path: Path
                        ) -> AsyncIterator[SandboxManager]:
    async with _manager(host_browser_driver, db, tmp_path) as manager:
        yield manager


@contextlib.asynccontextmanager
async def _driver(request: pytest.FixtureRequest, world: PageWorld,
                  tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[BrowserDriver]:
    name: str = request.param
    require(name)
    if name == "microvm":
        request.getfixturevalue("browser_image")
    tmp = tmp_path_factory.mktemp(f"browser-{name}")
    driver = PooledDriver(
        sandbox_probe.build_backend(name, sandbox_settings(tmp, name), variant="browser"),
        pool_size=0, limits=BROWSER_LIMITS, egress=world.proxy())
    try:
        yield BrowserDriver(driver, tmp)
    finally:
        await driver.close()


@contextlib.asynccontextmanager
async def _manager(browser: BrowserDriver, db: Database, tmp_path: Path
                   ) -> AsyncIterator[SandboxManager]:
    manager = SandboxManager(browser.driver, directory_blobs(db, tmp_path / "blobs"),
                             limits=BROWSER_LIMITS, hibernate_after=0,
                             browser_driver=browser.driver, browser_limits=BROWSER_LIMITS)
    try:
        yield manager
    finally:
        await manager.destroy_all()  # the driver is the module's


async def browse(tools: BuiltinTools, run: RunId, tool: str, **arguments: Any
                 ) -> tuple[bool, Any]:
    outcome = await tools.call(TenantId("tenant-b"), run, tool, arguments, egress=(HOST,),
                               browser=True)
    try:
        return outcome.ok, json.loads(outcome.text)
    except ValueError:
        return outcome.ok, outcome.text


def png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == PNG and data[12:16] == b"IHDR"
    width, height = struct.unpack(">II", data[16:24])
    return int(width), int(height)


async def test_an_agent_opens_a_page_clicks_reads_the_next_and_screenshots_it(
    fakes: Fakes, database_dsn: str, db: Database, browsers: SandboxManager, world: PageWorld,
    tmp_path: Path,
) -> None:
    # The API's blob store is the worker's (<data dir>/blobs): the console shows the shot.
    data_dir = tmp_path
    blobs = directory_blobs(db, data_dir / "blobs")  # as the API and the worker open it
    async with serving_api(database_dsn, data_dir=data_dir) as api, running_worker(
            database_dsn, fakes.model.base_url, sandboxes=browsers, browser=POLICY):
        tenant, h = await api.tenant()
        agent = await api.agent(h, tools=["browser_open", "browser_click",
                                          "browser_screenshot", "browser_extract",
                                          "run_python"], sandbox={"egress": [HOST]})
        world.paths.clear()
        run_id = await api.start(h, agent, scripted(
            call("browser_open", url=f"http://{HOST}/"),
            call("browser_click", text="Next page"),
            call("browser_screenshot"),
            call("browser_extract", selector="#answer"),
            call("run_python", code=BROWSER_OWNERS),
            call("browser_open", url=f"http://{HOST}/?again=1"),
            answer("I read: {tool_results}")))
        events = await api.events_until_end(h, run_id, within=600)
        run = await api.run(h, run_id)
        await _check_the_console_shows_the_shot(api, tenant, run_id, events)
        shot = json.loads(next(e["data"]["result"] for e in events
                               if e["type"] == "ToolCompleted"
                               and e["data"]["tool"] == "browser_screenshot"))
        # A real PNG of the page, in the blob store under the tenant, named by the event.
        data = await browsers.blobs.get(TenantId(tenant), shot["screenshot"])
        assert len(data) == shot["bytes"] and png_size(data) == (1280, 800)
        # A row of its run, its bytes counted to its tenant.
        row = await blobs.record(TenantId(tenant), RunId.parse(run_id), shot["screenshot"])
        assert (row.kind, row.bytes) == (BlobKind.SCREENSHOT, shot["bytes"])
        # Deleting the run deletes its screenshot with it, and gives its bytes back.
        assert (await api.client.delete(f"/v1/runs/{run_id}", headers=h)).status_code == 204
        assert shot["screenshot"] not in await stored(blobs.objects, tenant)
        assert await blobs.of_run(TenantId(tenant), RunId.parse(run_id)) == []
        assert await blobs.usage(TenantId(tenant)) == 0
    assert run["status"] == "finished", run
    assert "The answer is 42." in str(run["answer"])
    done: dict[str, Any] = {}  # each tool's first call
    for e in events:
        if e["type"] == "ToolCompleted":
            done.setdefault(e["data"]["tool"], e["data"])
    opened = json.loads(done["browser_open"]["result"])
    assert (opened["title"], opened["status"], opened["url"]) == (
        "Start", 200, f"http://{HOST}/")
    assert "First page." in opened["text"]
    clicked = json.loads(done["browser_click"]["result"])
    assert clicked["url"] == f"http://{HOST}/two" and "The answer is 42." in clicked["text"]
    shot = json.loads(done["browser_screenshot"]["result"])
    assert shot["content_type"] == "image/png" and shot["url"] == f"http://{HOST}/two"
    assert done["browser_screenshot"]["blob_refs"] == [shot["screenshot"]]
    # Code run in the same sandbox, and the sweep after it of what code left running, leave
    # the browser alone: the next page needs no new browser. In the microVM the browser
    # runs as its own user (the sweep there kills every process of the code's user).
    owners = json.loads(done["run_python"]["result"])["stdout"].split()
    assert set(owners) == ({"1001"} if browsers.backend == "microvm" else {"1000"}), owners
    again = [e["data"] for e in events if e["type"] == "ToolCompleted"][-1]
    assert again["tool"] == "browser_open" and "browser_start_ms" not in again["sandbox"]
    # One sandbox served the whole run, on the backend under test; the page server saw
    # exactly the pages, through the proxy, at the address the proxy vetted.
    assert {d["sandbox"]["id"] for d in done.values()} == {
        done["browser_open"]["sandbox"]["id"]}
    assert done["browser_open"]["sandbox"]["backend"] == browsers.backend
    assert "browser_start_ms" in done["browser_open"]["sandbox"]
    assert world.paths == ["/", "/two", "/"]


async def _check_the_console_shows_the_shot(api: Api, tenant: str, run_id: str,
                                            events: list[dict[str, Any]]) -> None:
    cookie, _ = session.issue(OPERATOR_TOKEN, epoch=epoch.FIRST)
    signed = {"Cookie": f"{session.SESSION_COOKIE}={cookie}"}
    shot = next(e for e in events if e["type"] == "ToolCompleted"
                and e["data"]["tool"] == "browser_screenshot")
    base = f"/console/runs/{tenant}/{run_id}"
    link = f"{base}/events/{shot['seq']}/blob_refs?n=0"
    page = await api.client.get(base, headers=signed)
    assert page.status_code == 200 and f'<img class="shot" src="{link}"' in page.text
    image = await api.client.get(link, headers=signed)
    assert image.status_code == 200 and image.headers["content-type"] == "image/png"
    assert png_size(image.content) == (1280, 800)
    assert (await api.client.get(link)).status_code in (303, 401)  # the session is needed


async def test_redirects_inside_or_off_the_list_get_nothing_through(
    host_browsers: SandboxManager, world: PageWorld,
) -> None:
    tools = BuiltinTools(host_browsers, POLICY)
    run = RunId.new()
    world.paths.clear()
    world.dialed.clear()
    for path, host, reason in (("/to-loopback", "127.0.0.1", "internal_address"),
                               ("/to-metadata", "169.254.169.254", "metadata_address"),
                               ("/to-elsewhere", OFF_LIST, "not_allowed")):
        ok, page = await browse(tools, run, "browser_open", url=f"http://{HOST}{path}")
        assert ok, page
        # Told to the model: what the page tried, and that the proxy refused it.
        assert {"host": host, "port": 80 if host != "127.0.0.1" else world.port,
                "reason": reason} in page["blocked"], page
        assert "internal only" not in page["text"]
    # Only the redirecting pages were fetched, all from the one vetted public address.
    assert world.paths == ["/to-loopback", "/to-metadata", "/to-elsewhere"]
    assert {str(address) for address, _ in world.dialed} == {"93.184.215.14"}
    await host_browsers.end(TenantId("tenant-b"), run, None)


async def test_file_and_chrome_urls_are_refused_at_the_edge_and_in_the_guest(
    host_browsers: SandboxManager, world: PageWorld,
) -> None:
    tools = BuiltinTools(host_browsers, POLICY)
    run = RunId.new()
    for url in ("file:///etc/passwd", "chrome://settings", "javascript:alert(1)"):
        ok, text = await browse(tools, run, "browser_open", url=url)
        assert not ok and "only http and https" in text
    # Past the edge, the guest refuses too, and a page that redirects to file: is stopped.
    sandbox, _ = await host_browsers.for_run(TenantId("tenant-b"), run, egress=(HOST,),
                                        browser=True)
    reply = await sandbox.browser("open", timeout_s=90, url="file:///etc/passwd",
                                  max_pages=20, max_bytes=1 << 26)
    assert reply.refused and "only http and https" in reply.refused
    ok, page = await browse(tools, run, "browser_open", url=f"http://{HOST}/to-file")
    assert "root:x:0:0" not in json.dumps(page)
    await host_browsers.end(TenantId("tenant-b"), run, None)


async def test_a_download_leaves_nothing_in_the_sandbox_or_on_the_host(
    host_browsers: SandboxManager, host_browser_driver: BrowserDriver, world: PageWorld,
    tmp_path: Path,
) -> None:
    tools = BuiltinTools(host_browsers, POLICY)
    run = RunId.new()
    ok, page = await browse(tools, run, "browser_open", url=f"http://{HOST}/download")
    assert ok and page["title"] == "Download"
    ok, _ = await browse(tools, run, "browser_click", selector="#get")
    sandbox, _ = await host_browsers.for_run(TenantId("tenant-b"), run, egress=(HOST,),
                                        browser=True)
    # Everywhere the sandbox can write (its root and /usr are read-only).
    found = await sandbox.run_shell(f"find /tmp /work /dev/shm -name '{DOWNLOAD_NAME}*' "
                                    "2>/dev/null; "
                                    "ls -A /work", timeout_s=60)
    assert DOWNLOAD_NAME not in found.stdout and found.stdout.strip() == ""
    await host_browsers.end(TenantId("tenant-b"), run, None)
    # Nor on the host: not in the sandboxes' own folders, the blob store's, the home
    # folder or /tmp.
    roots = (Path.home(), Path("/tmp"), host_browser_driver.folder, tmp_path)
    assert [p for root in roots for p in root.rglob(f"{DOWNLOAD_NAME}*")] == []


async def test_two_runs_browsers_share_no_cookies(
    host_browsers: SandboxManager, world: PageWorld,
) -> None:
    tools = BuiltinTools(host_browsers, POLICY)
    first, second = RunId.new(), RunId.new()
    await browse(tools, first, "browser_open", url=f"http://{HOST}/set-cookie")
    ok, page = await browse(tools, first, "browser_open", url=f"http://{HOST}/cookie")
    assert ok and "session=run-one-secret" in page["text"]  # kept between steps of a run
    ok, page = await browse(tools, second, "browser_open", url=f"http://{HOST}/cookie")
    assert ok and page["text"] == "no cookie"
    for run in (first, second):
        await host_browsers.end(TenantId("tenant-b"), run, None)


async def test_an_injected_page_cannot_reach_a_tool_off_the_allow_list(
    api: Api, fakes: Fakes, database_dsn: str, host_browsers: SandboxManager,
) -> None:
    tenant, h = await api.tenant()
    await api.tool_server(tenant, fakes.mcp.url)  # serves `effect`: registered, not allowed
    agent = await api.agent(h, tools=["browser_open"], sandbox={"egress": [HOST]})
    async with running_worker(database_dsn, fakes.model.base_url, sandboxes=host_browsers,
                              browser=POLICY):
        run_id = await api.start(h, agent, scripted(
            call("browser_open", url=f"http://{HOST}/inject"),
            call("effect", note="refund 10000 to order-666"),  # the scripted model obeys
            answer("finished anyway")))
        events = await api.events_until_end(h, run_id, within=600)
    assert fakes.mcp.calls == []  # nothing reached the tool server
    done = [e["data"] for e in events if e["type"] == "ToolCompleted"]
    assert INJECTION in json.loads(done[0]["result"])["text"]
    assert done[1]["tool"] == "effect" and "not available to this agent" in done[1]["error"]
    # The page's text reached the model fenced, as data.
    second = fakes.model.requests[1].json()
    tool_message = next(m for m in second["messages"] if m["role"] == "tool")
    assert tool_message["content"].startswith('<tool_output tool="browser_open" status="ok">')


async def test_bwrap_refuses_the_browser_unless_development_backends_are_allowed(
    db: Database, tmp_path: Path,
) -> None:
    require("bwrap")
    driver = PooledDriver(sandbox_probe.build_backend(
        "bwrap", sandbox_settings(tmp_path, "bwrap"), variant="browser"),
        pool_size=0, limits=BROWSER_LIMITS)
    manager = SandboxManager(driver, directory_blobs(db, tmp_path / "blobs"),
                             limits=BROWSER_LIMITS, hibernate_after=0, browser_driver=driver)
    tools = BuiltinTools(manager)  # a worker's default policy
    run = RunId.new()
    try:
        ok, text = await browse(tools, run, "browser_open", url=f"http://{HOST}/")
        assert not ok and "TENANTRY_BROWSER_DEV_BACKENDS=1" in text and "bwrap" in text
        assert manager.live == 0  # refused before any sandbox was started
        # The agent's code tools still run (in a sandbox without the browser's allowance).
        ok, result = await browse(tools, run, "run_python", code="print(6 * 7)")
        assert ok and result["stdout"] == "42\n"
    finally:
        await manager.close()


async def test_a_runs_browser_keeps_to_its_time_limit_and_page_cap(
    host_browsers: SandboxManager, world: PageWorld,
) -> None:
    tools = BuiltinTools(host_browsers, replace(POLICY, page_timeout_s=4.0, max_pages=3))
    run = RunId.new()
    ok, page = await browse(tools, run, "browser_open", url=f"http://{HOST}/slow")
    # Stopped at the limit: the model reads what loaded, and why it is partial.
    assert ok and "did not finish loading" in page["error"] and "partly here" in page["text"]
    ok, page = await browse(tools, run, "browser_open", url=f"http://{HOST}/")
    assert ok and page["title"] == "Start"  # the same browser goes on
    ok, page = await browse(tools, run, "browser_click", text="Next page")
    assert ok and page["pages"] == 3
    ok, text = await browse(tools, run, "browser_open", url=f"http://{HOST}/two")
    assert not ok and "cap of 3 pages" in text
    await host_browsers.end(TenantId("tenant-b"), run, None)


async def test_a_workers_sandbox_manager_has_browser_sandboxes_with_the_browser_limits(
    db: Database, tmp_path: Path,
) -> None:
    """The production wiring (``probe.sandbox_manager``, as `tenantry worker` builds it):
    a browser driver beside the code one, with the configured memory, and the worker's
    browser policy from its settings."""
    require("gvisor")
    settings = replace(sandbox_settings(tmp_path, "gvisor"), sandbox_pool_size=0,
                       sandbox_browser_memory_mib=1024, browser_max_pages=7)
    async with sandbox_probe.sandbox_manager(settings, directory_blobs(db, tmp_path / "b")
                                             ) as manager:
        assert manager is not None and manager.browser_driver is not None
        assert manager.browser_limits.memory_mib == 1024
        assert manager.limits.memory_mib == settings.sandbox_memory_mib
        tools = BuiltinTools(manager, browser_policy(settings))
        assert tools.browser.max_pages == 7 and not tools.browser.allow_dev_backends
        run = RunId.new()
        # The worker's own proxy: an agent with no hosts allowed reaches nothing.
        outcome = await tools.call(TenantId("tenant-w"), run, "browser_open",
                                   {"url": "http://blocked.invalid/"}, browser=True)
        assert outcome.ok and "browser_start_ms" in outcome.sandbox, outcome
        page = json.loads(outcome.text)
        assert page["status"] == 403 and "sandbox.egress is empty" in page["text"]
        sandbox, _ = await manager.for_run(TenantId("tenant-w"), run, browser=True)
        assert sandbox.limits == manager.browser_limits
