"""A webhook receiver on a loopback port: records every POST to ``/hook`` (headers and
body) and answers 500 to the first ``fail_first`` of them, 204 after."""

from __future__ import annotations

import asyncio

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from tenantry.models.loopback import LoopbackServer


class Receiver:
    def __init__(self, fail_first: int = 0) -> None:
        self.received: list[tuple[dict[str, str], bytes]] = []
        self.fail_first = fail_first
        self.arrived = asyncio.Event()
        self.server = LoopbackServer(Starlette(routes=[
            Route("/hook", self.hook, methods=["POST"])]))

    async def hook(self, request: Request) -> Response:
        self.received.append((dict(request.headers), await request.body()))
        if len(self.received) <= self.fail_first:
            return Response(status_code=500)
        self.arrived.set()
        return Response(status_code=204)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.port}/hook"
