"""Refuse oversize request bodies before any handler sees them (413 problem+json).

Bodies are buffered up to the limit and replayed, so the check also covers chunked uploads
that send no Content-Length."""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from tenantry.api.problems import from_error
from tenantry.errors import PayloadTooLarge


class BodyLimit:
    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] not in ("POST", "PUT", "PATCH"):
            await self.app(scope, receive, send)
            return
        for name, value in scope["headers"]:
            if name == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    declared = -1
                if declared > self.max_bytes:
                    await self._refuse(scope, receive, send)
                    return
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_bytes:
                await self._refuse(scope, receive, send)
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        await self.app(scope, replaying(b"".join(chunks), receive), send)

    async def _refuse(self, scope: Scope, receive: Receive, send: Send) -> None:
        refused = PayloadTooLarge(f"Request bodies are limited to {self.max_bytes} bytes.",
                                  max_bytes=self.max_bytes)
        await from_error(refused)(scope, receive, send)


def replaying(body: bytes, receive: Receive) -> Receive:
    """A ``receive`` that hands the app the already-read ``body`` as one message, then
    whatever the client sends next (its disconnect)."""
    pending: list[Message] = [{"type": "http.request", "body": body, "more_body": False}]

    async def replay() -> Message:
        return pending.pop() if pending else await receive()

    return replay
