"""http_client: CPU per request of the platform's HTTP/1.1 client (tenantry.http1) against
httpx2, and of its MCP client against the official SDK's, on the same loopback servers.

The servers run in child processes, so this process's CPU (``time.process_time``) is the
client's alone: the figure is microseconds of client CPU per request, at 1 and at 20
requests in flight. Each pair is measured in alternating rounds (the best round of each
counts: a busy machine only ever adds CPU).

- ``http``: POST a 1 KiB JSON body, get a 1 KiB JSON answer (Content-Length), as a model
  provider call does; ``sse``: the same answered as one event of a chunked event stream, as
  an MCP tool call usually is.
- ``mcp``: ``tools/call echo`` on the MCP test server (tenantry.testing.mcp_server, the
  official SDK's server) — SDK client (``mcp.client.Client`` over streamable HTTP, one
  session) against tenantry.tools.mcp_client.

    .venv/bin/python benchmarks/http_client.py   # one JSON line last
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

REQUESTS = int(os.environ.get("HTTP_CLIENT_REQUESTS", "2000"))
ROUNDS = int(os.environ.get("HTTP_CLIENT_ROUNDS", "3"))
BODY = json.dumps({"messages": [{"role": "user", "content": "x" * 1000}]}).encode()

_SERVER = r'''
import asyncio, sys
ANSWER = b'{"choices":[{"message":{"content":"' + b"y" * 1000 + b'"}}]}'
JSON = (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n"
        % len(ANSWER)) + ANSWER
EVENT = b'event: message\r\ndata: {"jsonrpc":"2.0","id":1,"result":' + ANSWER + b'}\r\n\r\n'
SSE = (b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked"
       b"\r\n\r\n%x\r\n%s\r\n0\r\n\r\n" % (len(EVENT), EVENT))
async def serve(reader, writer):
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            length = 0
            for line in head.split(b"\r\n"):
                if line[:15].lower() == b"content-length:":
                    length = int(line[15:])
            await reader.readexactly(length)
            writer.write(SSE if head.startswith(b"POST /sse") else JSON)
    except (asyncio.IncompleteReadError, ConnectionError):
        pass
    writer.close()
async def main():
    server = await asyncio.start_server(serve, "127.0.0.1", 0, backlog=1024)
    print(server.sockets[0].getsockname()[1], flush=True)
    await server.serve_forever()
asyncio.run(main())
'''


async def _measure(send: Callable[[], Awaitable[Any]], concurrency: int) -> float:
    """Client CPU microseconds per request, ``REQUESTS`` requests ``concurrency`` at once."""
    for _ in range(50):  # warm: connections open, caches filled
        await send()
    queue = iter(range(REQUESTS))

    async def lane() -> None:
        for _ in queue:
            await send()

    started = time.process_time()
    await asyncio.gather(*(lane() for _ in range(concurrency)))
    return (time.process_time() - started) / REQUESTS * 1e6


async def _pair(name: str, clients: dict[str, Callable[[], Awaitable[Any]]],
                concurrency: int) -> dict[str, float]:
    best: dict[str, float] = {}
    for _ in range(ROUNDS):
        for label, send in clients.items():
            us = await _measure(send, concurrency)
            best[label] = min(best.get(label, us), us)
    print(f"{name} x{concurrency}: " + ", ".join(f"{k} {v:.0f} µs" for k, v in best.items()),
          file=sys.stderr)
    return {k: round(v, 1) for k, v in best.items()}


async def _http(port: int) -> dict[str, Any]:
    import httpx2

    from tenantry import http1

    out: dict[str, Any] = {}
    ours = http1.HttpClient()
    async with httpx2.AsyncClient(timeout=30) as theirs:
        for path in ("json", "sse"):
            url = f"http://127.0.0.1:{port}/{path}"

            async def httpx_send(url: str = url) -> None:
                response = await theirs.post(url, content=BODY,
                                             headers={"Content-Type": "application/json"})
                assert response.status_code == 200 and response.content

            async def http1_send(url: str = url) -> None:
                response = await ours.request("POST", url, body=BODY,
                                              headers={"Content-Type": "application/json"})
                assert response.status == 200 and response.content

            for concurrency in (1, 20):
                out[f"{path}_x{concurrency}"] = await _pair(
                    path, {"httpx2": httpx_send, "http1": http1_send}, concurrency)
    await ours.aclose()
    return out


async def _mcp(url: str) -> dict[str, Any]:
    from mcp.client import Client
    from mcp.client.streamable_http import streamable_http_client

    from tenantry.tools.mcp_client import McpToolClient

    out: dict[str, Any] = {}
    async with Client(streamable_http_client(url)) as sdk, McpToolClient() as ours:
        async def sdk_send() -> None:
            result = await sdk.call_tool("echo", {"text": "hi"})
            assert not result.is_error

        async def ours_send() -> None:
            assert (await ours.call(url, "echo", {"text": "hi"})).ok

        for concurrency in (1, 20):
            out[f"x{concurrency}"] = await _pair("mcp", {"sdk": sdk_send, "ours": ours_send},
                                                 concurrency)
    return out


def _run() -> dict[str, Any]:
    raw = subprocess.Popen([sys.executable, "-c", _SERVER], stdout=subprocess.PIPE, text=True)
    mcp = subprocess.Popen([sys.executable, "-m", "tenantry.testing.mcp_server", "--port", "0"],
                           stdout=subprocess.PIPE, text=True)
    try:
        assert raw.stdout is not None and mcp.stdout is not None
        port = int(raw.stdout.readline())
        mcp_url = mcp.stdout.readline().split()[-1]
        return {"requests": REQUESTS, "http_us_per_request": asyncio.run(_http(port)),
                "mcp_us_per_call": asyncio.run(_mcp(mcp_url)), "load": os.getloadavg()[0]}
    finally:
        for proc in (raw, mcp):
            proc.terminate()
            proc.wait()


if __name__ == "__main__":
    print(json.dumps(_run()))
