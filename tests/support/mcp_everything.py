"""A third-party MCP server for conformance tests: the reference implementation's
``@modelcontextprotocol/server-everything`` (TypeScript SDK), run with node over its
streamable HTTP transport.

The npm package is installed on first use, pinned (tests/support/npm_packages.py)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
from collections.abc import AsyncIterator
from pathlib import Path

from tests.support.npm_packages import cache_folder, installed, needs_node

PACKAGE = "@modelcontextprotocol/server-everything"
VERSION = "2026.8.31"

__all__ = ["everything_server", "needs_node"]


def installed_entry_point() -> Path:
    """The server's script, installing the package first if needed."""
    folder = cache_folder(f"server-everything-{VERSION}")
    entry = folder / "node_modules" / PACKAGE / "dist" / "index.js"
    installed(folder, [f"{PACKAGE}@{VERSION}"], marker=entry)
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
