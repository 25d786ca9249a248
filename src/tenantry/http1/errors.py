"""What an outbound HTTP request can fail with, before any status was answered. Callers map
these to their own domain's errors (a tool server or a model provider being unavailable);
``reason`` is the short word they report (connect, timeout, network, protocol, too_large)."""

from __future__ import annotations

from typing import ClassVar

from tenantry.errors import TenantryError


class HttpError(TenantryError):
    """The request got no (complete) answer. It may or may not have reached the server."""

    type = "upstream_unavailable"
    status = 502
    title = "Upstream unavailable"
    retryable = True
    reason: ClassVar[str] = "network"


class ConnectFailed(HttpError):
    """No connection could be opened (refused, unreachable, DNS, TLS handshake)."""

    reason = "connect"


class ConnectTimeout(ConnectFailed):
    """Opening the connection took longer than the connect timeout."""

    reason = "timeout"


class RequestTimeout(HttpError):
    """The connect or the whole request took longer than its timeout."""

    reason = "timeout"


class ConnectionLost(HttpError):
    """The connection closed or broke before the response was complete."""

    reason = "network"


class ProtocolError(HttpError):
    """The server answered with something that is not HTTP/1.1 as we read it."""

    reason = "protocol"


class ResponseTooLarge(HttpError):
    """The response body went past the client's size cap."""

    reason = "too_large"
