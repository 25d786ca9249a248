"""The router's HTTP server protocol: uvicorn's own, plus the one thing ASGI cannot say —
"drop this caller's connection now".

When the router must cut an answer (the cell went silent mid-body, or the caller stopped
reading), ending the ASGI call leaves uvicorn to close the connection gracefully, which
waits for its unsent bytes to drain: a caller that reads nothing would keep that socket,
and what is buffered for it, for as long as it likes. ``scope[ABORT]`` is the
connection's ``transport.abort``: the socket goes at once, buffer and all."""

from __future__ import annotations

from typing import Any, cast

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

#: The scope key of the callable that drops the caller's connection (absent under a server
#: without this protocol: the router then raises and the server closes it its own way).
ABORT = "tenantry.abort"


class RouterHttp(HttpToolsProtocol):
    """Pass as ``uvicorn.Config(http=RouterHttp)``."""

    def on_message_begin(self) -> None:
        super().on_message_begin()
        cast("dict[str, Any]", self.scope)[ABORT] = self.transport.abort
