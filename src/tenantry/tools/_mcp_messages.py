"""What MCP's streamable HTTP carries, apart from the session that carries it
(``_mcp_wire.py``): the protocol's versions, keys and error codes, its errors, the bounds on
what one exchange or stream may carry (the module docstring there says why), and the
header and URL rules (``x-mcp-header``, credentials kept out of what is logged), and how a
tool list is read."""

from __future__ import annotations

import base64
import logging
import re
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import urlsplit, urlunsplit

log = logging.getLogger("tenantry.tools.mcp_client")

LATEST_MODERN_VERSION = "2026-07-28"
MODERN_VERSIONS = ("2026-07-28",)
LATEST_HANDSHAKE_VERSION = "2025-11-25"
HANDSHAKE_VERSIONS = ("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25")
DISCOVER_TIMEOUT_S = 10.0

PROTOCOL_VERSION_META_KEY = "io.modelcontextprotocol/protocolVersion"
CLIENT_INFO_META_KEY = "io.modelcontextprotocol/clientInfo"
CLIENT_CAPABILITIES_META_KEY = "io.modelcontextprotocol/clientCapabilities"
CLIENT_INFO = {"name": "tenantry", "version": "1"}

METHOD_NOT_FOUND = -32601
INVALID_REQUEST = -32600
INTERNAL_ERROR = -32603
PARSE_ERROR = -32700
UNSUPPORTED_PROTOCOL_VERSION = -32022

Headers = tuple[tuple[str, str], ...]

#: One request's whole answer: the JSON body, or the event stream up to the response. The
#: model reads 8 KiB of a tool's output (the rest is kept as a blob): 4 MiB is room for any
#: honest answer, and what a worker may have to hold per call in flight.
MAX_ANSWER_BYTES = 4 * 1024 * 1024
#: Messages a server may send on one request's stream before its answer (progress and log
#: notifications of a long call), and requests among them (ping, sampling, elicitation,
#: roots: this client serves ping only and refuses the rest, each reply a POST of its own).
MAX_MESSAGES_PER_EXCHANGE = 1024
MAX_SERVER_REQUESTS_PER_EXCHANGE = 16
#: Replies to the server's requests being sent at once, per session.
MAX_REPLIES_IN_FLIGHT = 8
#: What a session's notification stream (legacy GET) may deliver and how often it may be
#: opened over the session's life (by a call, with that call's credentials, whenever it is
#: not open); past either, the session stops listening (a changed tool list is still seen,
#: when the list is read again past its maximum age).
MAX_LISTEN_MESSAGES = 1024
MAX_LISTEN_OPENS = 16
#: How often one call's event stream may be resumed (SEP-1699: a server may end the stream
#: after an event id and send the rest when asked with ``Last-Event-ID``).
MAX_RESUMES = 8


class RpcError(Exception):
    """A JSON-RPC error answer, or an HTTP error status without one (``code`` None)."""

    def __init__(self, code: int | None, message: str, data: Any = None,
                 http_status: int | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.data = data
        self.http_status = http_status


class Unauthorized(RpcError):
    """HTTP 401 or 403 from the server: its credential is missing, expired or too narrow.
    ``challenge`` is its ``WWW-Authenticate`` header (OAuth: where to get a token, and for
    which scope)."""

    def __init__(self, status: int, challenge: str) -> None:
        super().__init__(None, f"HTTP {status}", http_status=status)
        self.challenge = challenge


class SessionExpired(Exception):
    """HTTP 404 to a request carrying our session id: the server no longer knows it."""


class BadMessage(Exception):
    """The server answered with something that is not the JSON-RPC message it should be, or
    more than one exchange may carry."""


class Allowance:
    """What one stream may still carry before the server is cut off."""

    __slots__ = ("messages", "requests", "what")

    def __init__(self, messages: int, requests: int, what: str) -> None:
        self.messages = messages
        self.requests = requests
        self.what = what

    def message(self, is_request: bool) -> None:
        self.messages -= 1
        if self.messages < 0:
            raise BadMessage(f"the server sent more than the {self.what}'s "
                             "allowance of messages")
        if is_request:
            self.requests -= 1
            if self.requests < 0:
                raise BadMessage(f"the server sent more than the {self.what}'s "
                                 "allowance of requests")


def rpc_code(error: Mapping[str, Any]) -> int:
    code = error.get("code")
    return code if isinstance(code, int) else INTERNAL_ERROR


def supported_versions(exc: RpcError) -> list[str] | None:
    data = exc.data
    supported = data.get("supported") if isinstance(data, dict) else None
    if isinstance(supported, list) and all(isinstance(v, str) for v in supported):
        return supported
    return None


def safe_url(url: str) -> str:
    """The url without userinfo, query or fragment, which may carry credentials."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if parts.port is not None:
        host = f"{host}:{parts.port}"
    return urlunsplit((parts.scheme, host, parts.path, "", ""))


# ---------------------------------------------------------------------- x-mcp-header

_TOKEN = re.compile(r"^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$")
_HEADER_SAFE = re.compile(r"^[\x20-\x7E]*$")
_B64_SENTINEL = re.compile(r"^=\?base64\?.*\?=$")


def encode_header_value(value: str) -> str:
    """As the SDK sends a name or argument in a header: verbatim if it is plain printable
    ASCII without edge whitespace, else ``=?base64?…?=``."""
    if _HEADER_SAFE.fullmatch(value) and value == value.strip() \
            and not _B64_SENTINEL.fullmatch(value):
        return value
    return f"=?base64?{base64.b64encode(value.encode()).decode('ascii')}?="


def x_mcp_header_map(schema: dict[str, Any]) -> dict[tuple[str, ...], str] | None:
    """Argument path → header token for every ``x-mcp-header`` on a property reached through
    ``properties`` alone; ``None`` if an annotation is invalid (not a token, not on a
    string/integer/boolean property, or repeated)."""
    found: dict[tuple[str, ...], str] = {}
    seen: set[str] = set()
    stack: list[tuple[tuple[str, ...], Any]] = [((), schema)]
    while stack:
        path, node = stack.pop()
        if not isinstance(node, dict):
            continue
        if path and "x-mcp-header" in node:
            token = node["x-mcp-header"]
            if not isinstance(token, str) or not _TOKEN.fullmatch(token) \
                    or node.get("type") not in ("string", "integer", "boolean") \
                    or token.lower() in seen:
                return None
            seen.add(token.lower())
            found[path] = token
        properties = node.get("properties")
        if isinstance(properties, dict):
            stack.extend(((*path, name), sub) for name, sub in properties.items())
    return found


def param_headers(header_map: Mapping[tuple[str, ...], str],
                  arguments: Mapping[str, Any]) -> Iterable[tuple[str, str]]:
    for path, token in header_map.items():
        value: Any = arguments
        for key in path:
            value = value.get(key) if isinstance(value, Mapping) else None
        if value is None:
            continue
        if isinstance(value, bool):
            rendered = "true" if value else "false"
        elif isinstance(value, str | int | float):
            rendered = str(value)
        else:
            continue
        yield f"Mcp-Param-{token}", encode_header_value(rendered)


def listed_tools(page: dict[str, Any], param_headers: dict[str, dict[tuple[str, ...], str]] | None,
                 url: str) -> list[dict[str, Any]]:
    """A tools/list page as ``{"name", "description", "input_schema"}`` dicts. With
    ``param_headers`` (a modern session's), the ``x-mcp-header`` arguments of each tool are
    remembered there (to be mirrored into ``Mcp-Param-*`` headers), and a tool whose
    annotations are invalid is dropped, as the 2026-07-28 protocol requires."""
    tools = page.get("tools")
    if not isinstance(tools, list):
        raise BadMessage("tools/list result without a tools list")
    out: list[dict[str, Any]] = []
    for tool in tools:
        if not isinstance(tool, dict) or not isinstance(name := tool.get("name"), str):
            raise BadMessage("a listed tool without a name")
        schema = tool.get("inputSchema")
        if not isinstance(schema, dict):
            raise BadMessage(f"tool {name[:80]!r} without an input schema")
        if param_headers is not None:
            header_map = x_mcp_header_map(schema)
            if header_map is None:
                log.warning("dropping tool %r of %s: invalid x-mcp-header", name, safe_url(url))
                param_headers.pop(name, None)
                continue
            param_headers[name] = header_map
        description = tool.get("description")
        out.append({"name": name,
                    "description": description if isinstance(description, str) else "",
                    "input_schema": schema})
    return out
