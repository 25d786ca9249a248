"""A third-party MCP server for conformance tests: the reference implementation's
``@modelcontextprotocol/server-everything`` (TypeScript SDK), run with node over its
streamable HTTP transport.

The npm package is installed on first use into a cache folder kept across checkouts
(``$XDG_CACHE_HOME/tenantry-tests/``, else ``~/.cache/…``), pinned to one version. node (and
npm with it) is in scripts/system-packages.txt, so `make test` runs these tests; they skip,
saying why, only where node or npm is missing."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import socket
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

PACKAGE = "@modelcontextprotocol/server-everything"
VERSION = "2026.8.31"

needs_node = pytest.mark.skipif(
    shutil.which("node") is None or shutil.which("npm") is None,
    reason="node or npm is not installed (nodejs: scripts/system-packages.txt); "
           "the third-party MCP server runs on node")


def _cache() -> Path:
    root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return root / "tenantry-tests" / f"server-everything-{VERSION}"


def installed_entry_point() -> Path:
    """The server's script, installing the package first if needed (npm, ~10 s once)."""
    folder = _cache()
    entry = folder / "node_modules" / PACKAGE / "dist" / "index.js"
    if entry.exists():
        return entry
    folder.mkdir(parents=True, exist_ok=True)
    result = subprocess.run(
        ["npm", "install", "--no-audit", "--no-fund", "--loglevel=error", "--prefix",
         str(folder), f"{PACKAGE}@{VERSION}"],
        capture_output=True, text=True, timeout=300, check=False)
    if result.returncode != 0 or not entry.exists():
        raise RuntimeError(f"npm install {PACKAGE}@{VERSION} failed:\n{result.stderr[-2000:]}")
    return entry


def _free_port() -> int:
    # The server takes its port from $PORT and cannot report one it picked itself.
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextlib.asynccontextmanager
async def everything_server() -> AsyncIterator[str]:
    """Run the server; yields its MCP endpoint url. Stopped (SIGTERM, then SIGKILL) after."""
    entry = await asyncio.to_thread(installed_entry_point)
    port = _free_port()
    proc = await asyncio.create_subprocess_exec(
        "node", str(entry), "streamableHttp", env={**os.environ, "PORT": str(port)},
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE)
    try:
        assert proc.stderr is not None
        async with asyncio.timeout(30):
            while True:
                line = await proc.stderr.readline()
                if not line:
                    raise RuntimeError("server-everything exited before listening")
                if b"listening on port" in line:
                    break
        drain = asyncio.create_task(_drain(proc.stderr))
        try:
            yield f"http://127.0.0.1:{port}/mcp"
        finally:
            drain.cancel()
    finally:
        if proc.returncode is None:
            proc.terminate()
            try:
                async with asyncio.timeout(5):
                    await proc.wait()
            except TimeoutError:
                proc.kill()
                await proc.wait()


async def _drain(stream: asyncio.StreamReader) -> None:
    while await stream.readline():
        pass
