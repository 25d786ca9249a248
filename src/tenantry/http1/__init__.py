"""A lean HTTP/1.1 client for the platform's own outbound calls (ADR 0022)."""

from tenantry.http1.client import (
    ConnectTo,
    HttpClient,
    Response,
    StreamedResponse,
    Target,
    target,
)
from tenantry.http1.errors import (
    ConnectFailed,
    ConnectionLost,
    ConnectTimeout,
    HttpError,
    ProtocolError,
    RequestTimeout,
    ResponseTooLarge,
)
from tenantry.http1.sse import SseData, SseEvent, SseParser

__all__ = [
    "ConnectFailed", "ConnectTimeout", "ConnectTo", "ConnectionLost", "HttpClient", "HttpError",
    "ProtocolError", "RequestTimeout", "Response", "ResponseTooLarge", "SseData", "SseEvent",
    "SseParser", "StreamedResponse", "Target", "target",
]
