"""Every shell (```sh, ```bash, ```console) and Python (```python) example in the how-tos
(docs/how-to/*.md), run against one live platform: `tenantry up` on a fresh data dir with the
MCP test server, started once for the module (docs/tour.md has its own test,
tests/e2e/test_readme_tour.py, which runs it as written).

What a how-to may assume, and this test gives it (as the how-tos say):

- (docs/README.md names these for the reader.) ``T`` and ``TENANTRY_URL``: the API's URL;
  ``OP`` and ``TENANTRY_OPERATOR_TOKEN``: the operator token; ``KEY`` and
  ``TENANTRY_API_KEY``: an API key (every scope) of the tenant ``acme``, which has the tool
  server ``effects`` (the MCP test server: tools ``effect``, ``echo``, ``add``, ``fail``,
  ``slow``) with its secret ``effects-token``; ``AGENT``: an agent of ``acme`` (model
  ``scripted``, tool ``echo``) with version 2 published and version 1 live; ``RUN``: a run
  of it that finished; ``HOME``: a fresh folder, the platform's data dir the default one in
  it (``~/.local/share/tenantry``, also in ``TENANTRY_DATA_DIR``); ``tenantry`` on
  ``PATH``. ``127.0.0.1:8080`` and ``localhost:8080`` in a block are this platform's port,
  ``.venv/bin/`` its environment.
- Each file runs in one bash with ``set -euo pipefail``, its blocks in order, so what a
  block exports or writes the next one sees; in a fresh folder that links the checkout's
  folders (``tests/``, ``examples/``, …: as at its root, without writing into it). The files
  run in name order and share the tenant ``acme``. A ```python block is its own program
  (``python -`` in that shell: it sees the exported variables, not an earlier block's
  names). A ```console block runs its ``$ `` lines (and the lines that continue them, after
  a ``\\``, ``|`` or ``&&``); its other lines are what they print, and each must be found in
  the block's output (stdout and stderr), compared on its stable parts: ``…`` / ``...``
  stand for anything, digits for any digits, and spacing is not compared (a table on a
  terminal is tab-separated in a pipe; JSON from the API is compact). Other blocks' ``#``
  comments showing an answer are not compared. ``curl`` fails on an HTTP error status
  (``--fail-with-body``): a block whose request is refused fails.
- A block that cannot run here (a production host, a real provider, another cluster, a
  fragment of an API listing) says so just above it, in the Markdown:
  ``<!-- docs-check: skip — why -->``. Each is listed, with its reason, as a skipped test
  (``test_example_left_out[...]``: `pytest -ra` prints them). A block without the marker
  must run and exit 0.
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx2
import pytest

from tests.support.api import free_port
from tests.support.up_process import BIN, start_up, stop_up, up_env

# The first file's test also starts the platform (tenantry up, a tenant, an agent and a run).
pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]
CHECKOUT = Path(__file__).resolve().parents[2]
HOW_TO = CHECKOUT / "docs" / "how-to"
LANGUAGES = ("sh", "bash", "console", "python")
_FENCE = re.compile(r"^```([a-z]*)\n(.*?)^```\n?", flags=re.S | re.M)
_SKIP = re.compile(r"<!--\s*docs-check:\s*skip\s*[—-]+\s*(.*?)\s*-->", flags=re.S)


@dataclass(frozen=True)
class Block:
    """One example: where it is (``run-tenantry.md:42``), its language and text, and why it
    is left out (``None``: it runs)."""

    where: str
    language: str
    text: str
    skip: str | None


def blocks(path: Path) -> list[Block]:
    """The file's runnable-language blocks, in order. A skip marker counts when it is the
    last thing before the block's fence (blank lines aside)."""
    text = path.read_text()
    found = []
    for match in _FENCE.finditer(text):
        if match.group(1) not in LANGUAGES:
            continue
        before = text[:match.start()].rstrip()
        marker = _SKIP.search(before[before.rfind("<!--"):]) if before.endswith("-->") else None
        line = text.count("\n", 0, match.start()) + 1
        found.append(Block(f"{path.name}:{line}", match.group(1), match.group(2),
                           " ".join(marker.group(1).split()) if marker else None))
    return found


FILES = sorted(HOW_TO.glob("*.md"))
EVERY = [block for path in FILES for block in blocks(path)]


def console_parts(text: str) -> tuple[str, list[str]]:
    """A ```console block's commands (``$ `` lines and their continuations) and the lines
    it shows as their output."""
    commands: list[str] = []
    shown: list[str] = []
    going_on = False
    for line in text.splitlines():
        if line.startswith("$ ") or going_on:
            commands.append(line[2:] if line.startswith("$ ") and not going_on else line)
            going_on = line.rstrip().endswith(("\\", "|", "&&"))
        elif line.strip():
            shown.append(line.strip())
    return "\n".join(commands), shown


def _squeezed(text: str) -> str:
    return re.sub(r"\s+", "", text)


def shown_pattern(line: str) -> re.Pattern[str]:
    """What a shown output line must match: its stable parts, spacing aside."""
    pieces = re.split(r"(…|\.\.\.|\d+)", _squeezed(line))
    return re.compile("".join(
        ".*?" if piece in ("…", "...") else r"\d+" if piece.isdigit() else re.escape(piece)
        for piece in pieces))


def _ours(text: str, port: int) -> str:
    return (text.replace("127.0.0.1:8080", f"127.0.0.1:{port}")
            .replace("localhost:8080", f"localhost:{port}")
            .replace(".venv/bin/", f"{BIN}/"))


#: A failed request fails its block (a `curl` without ``-f`` exits 0 on a 404): an example
#: that shows an error answer on purpose ends its command with ``|| true``. Both streams are
#: the block's output.
PREAMBLE = 'curl() { command curl --fail-with-body "$@"; }\nexec 2>&1'


def script(examples: list[Block], port: int) -> str:
    """The file's blocks that run, as one bash script; each block's output starts with a
    line ``=== <where>``."""
    parts = []
    for block in examples:
        body = block.text
        if block.language == "console":
            body, _ = console_parts(body)
        elif block.language == "python":
            body = f"python - <<'DOCS_CHECK_PYTHON'\n{body}DOCS_CHECK_PYTHON"
        parts.append(f"printf '\\n=== %s\\n' '{block.where}'\n{body}")
    return _ours("\n".join([PREAMBLE, *parts]), port)


@dataclass(frozen=True)
class Platform:
    env: dict[str, str]
    port: int


@pytest.fixture(scope="module")
def platform(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Platform]:
    """One platform for every how-to: `tenantry up`, the MCP test server, and the tenant
    ``acme`` with the tool server ``effects`` and an API key."""
    home = tmp_path_factory.mktemp("docs-platform")
    port, mcp_port = free_port(), free_port()
    tools = subprocess.Popen([sys.executable, "-m", "tenantry.testing.mcp_server",
                              "--port", str(mcp_port)], text=True,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    data = home / ".local" / "share" / "tenantry"  # the default data dir of HOME=home
    env = up_env(data, port, "unused")
    del env["TENANTRY_OPERATOR_TOKEN"]  # up makes one and keeps it in the data dir
    proc = None
    try:
        assert tools.stdout is not None and tools.stdout.readline().startswith("READY")
        proc = start_up(env, home / "up.log", demo=False)
        operator = (data / "operator_token").read_text().strip()
        url = f"http://127.0.0.1:{port}"
        with httpx2.Client(base_url=url, timeout=30,
                           headers={"Authorization": f"Bearer {operator}"}) as admin:
            for method, path, body in (
                    ("POST", "/admin/v1/tenants", {"name": "Acme", "tenant_id": "acme"}),
                    ("PUT", "/admin/v1/tenants/acme/secrets/effects-token", {"value": "s3"}),
                    ("POST", "/admin/v1/tenants/acme/tool-servers",
                     {"name": "effects", "url": f"http://127.0.0.1:{mcp_port}/mcp",
                      "honours_idempotency_keys": True, "secret": "effects-token"})):
                answer = admin.request(method, path, json=body)
                assert answer.status_code in (200, 201), answer.text
            key = admin.post("/admin/v1/tenants/acme/api-keys").json()["api_key"]
        agent, run = _agent_and_run(url, key)
        yield Platform({**env, "HOME": str(home), "PATH": f"{BIN}:{env['PATH']}",
                        "T": url, "TENANTRY_URL": url,
                        "OP": operator, "TENANTRY_OPERATOR_TOKEN": operator,
                        "KEY": key, "TENANTRY_API_KEY": key, "AGENT": agent, "RUN": run},
                       port)
    finally:
        if proc is not None:
            stop_up(proc, home / "up.log")
        tools.terminate()
        tools.communicate(timeout=30)


def _agent_and_run(url: str, key: str) -> tuple[str, str]:
    """``$AGENT``: an agent with version 2 published and version 1 live; ``$RUN``: a run of
    it that has finished."""
    from tenantry.client import Client

    with Client(url, api_key=key) as client:
        agent = client.agents.create("docs-agent", model="scripted",
                                     system_prompt="Answer briefly.", tools=["echo"])
        client.agents.create_version(agent.agent_id, model="scripted",
                                     system_prompt="Answer very briefly.", tools=["echo"])
        run = client.runs.create(agent.agent_id, "hello", version=1)
        assert client.runs.wait(run.run_id, timeout=60).status == "finished"
        return agent.agent_id, run.run_id


def _outputs(out: str) -> dict[str, str]:
    return dict(re.findall(r"^=== (\S+)\n(.*?)(?=^=== |\Z)", out, flags=re.S | re.M))


@pytest.mark.parametrize("path", [p for p in FILES if any(
    b.skip is None for b in blocks(p))], ids=lambda p: p.name)
def test_how_to_examples_run(path: Path, platform: Platform, tmp_path: Path) -> None:
    examples = [block for block in blocks(path) if block.skip is None]
    for top in CHECKOUT.iterdir():  # as at the checkout's root, without writing into it
        if top.is_dir() and not top.name.startswith("."):
            (tmp_path / top.name).symlink_to(top)
    done = subprocess.run(["bash", "-c", "set -euo pipefail\n" + script(examples, platform.port)],
                          env=platform.env, cwd=tmp_path, capture_output=True, text=True,
                          timeout=200)
    outputs = _outputs(done.stdout)
    last = list(outputs)[-1] if outputs else examples[0].where
    assert done.returncode == 0, (
        f"{last} failed (exit {done.returncode}):\n{outputs.get(last, done.stdout)[-3000:]}")
    for block in examples:
        if block.language != "console":
            continue
        got = _squeezed(outputs[block.where])
        for line in console_parts(block.text)[1]:
            assert shown_pattern(line).search(got), (
                f"{block.where} shows {line!r}; it printed:\n{outputs[block.where]}")


@pytest.mark.parametrize("block", [b for b in EVERY if b.skip is not None],
                         ids=lambda b: b.where)
def test_example_left_out(block: Block) -> None:
    pytest.skip(f"{block.where} not run: {block.skip}")


def test_the_examples_are_found() -> None:
    # A fence this test does not read (```shell, an indented one) would be left out unseen.
    every = [m.group(1) for p in FILES for m in _FENCE.finditer(p.read_text())]
    assert not {lang for lang in every} - {*LANGUAGES, "", "json", "yaml", "ini", "text",
                                          "promql", "sql", "toml", "http"}
    assert len(EVERY) > 80
