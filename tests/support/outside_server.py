"""An HTTP server "outside" (run by tests.support.outside_host inside a network namespace
with a public address): a refund endpoint that counts what it was asked and what it did,
and can hold a request until told to answer — so a test crashes a worker while its call is
mid-request, by arrangement, not by timing.

    python -m tests.support.outside_server --port 8080 [--hold]

- ``GET /`` a page with a refund form (``POST /refund``, a "Refund" button).
- ``POST /refund``: one refund per ``Idempotency-Key`` (a request without one always
  refunds). Prints ``REQUEST <n> key=<key or ->`` for each, and with ``--hold`` waits for a
  ``RELEASE`` line on stdin before answering the first.
- ``GET /stats``: ``{"requests": [...keys...], "refunds": n}``.
Standard library only: it runs under ``ip netns exec`` with the test's interpreter."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys

PAGE = (b"<!doctype html><html><head><title>Refunds</title></head><body>"
        b"<form method=post action=/refund><input name=order value=o-7>"
        b"<button type=submit>Refund</button></form></body></html>")


class Outside:
    def __init__(self, hold: bool) -> None:
        self.hold = hold
        self.keys: list[str | None] = []
        self.refunded: set[str] = set()
        self.refunds = 0
        self.released = asyncio.Event()

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                line, *fields = head.decode("latin-1").split("\r\n")
                headers = {k.strip().lower(): v.strip() for k, _, v in
                           (f.partition(":") for f in fields if f)}
                body = await reader.readexactly(int(headers.get("content-length", "0")))
                method, target = [*line.split(" "), "", ""][:2]
                # RFC 9112 §3.2.2: a server accepts the absolute form too.
                path = "/" + target.split("://", 1)[1].partition("/")[2] \
                    if "://" in target else target
                status, kind, out = await self.answer(method, path, headers, body)
                close = headers.get("connection", "").lower() == "close"
                ending = "Connection: close\r\n" if close else ""
                writer.write(f"HTTP/1.1 {status} X\r\nContent-Type: {kind}\r\n"
                             f"Content-Length: {len(out)}\r\n{ending}\r\n".encode() + out)
                await writer.drain()
                if close:
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        writer.close()

    async def answer(self, method: str, path: str, headers: dict[str, str],
                     body: bytes) -> tuple[int, str, bytes]:
        if method == "GET" and path == "/":
            return 200, "text/html", PAGE
        if method == "GET" and path == "/stats":
            return 200, "application/json", json.dumps(
                {"requests": self.keys, "refunds": self.refunds}).encode()
        if method == "POST" and path == "/refund":
            key = headers.get("idempotency-key")
            self.keys.append(key)
            print(f"REQUEST {len(self.keys)} key={key or '-'}", flush=True)
            if key is None or key not in self.refunded:
                self.refunds += 1
                if key is not None:
                    self.refunded.add(key)
            if self.hold and len(self.keys) == 1:
                await self.released.wait()
            return 200, "text/html", b"<html><body><p id=done>refunded</p></body></html>"
        return 404, "text/plain", b"not here"


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--hold", action="store_true")
    args = parser.parse_args()
    outside = Outside(args.hold)
    server = await asyncio.start_server(outside.serve, "0.0.0.0", args.port)
    print("READY", flush=True)
    loop = asyncio.get_running_loop()
    stdin = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(stdin), sys.stdin)
    async with server:
        while line := await stdin.readline():
            if line.strip() == b"RELEASE":
                outside.released.set()


if __name__ == "__main__":
    asyncio.run(main())
