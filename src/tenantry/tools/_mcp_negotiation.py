"""Which protocol generation a new MCP session speaks, negotiated as the official SDK's
``mode="auto"`` does (mcp/client/_probe.py): probe ``server/discover`` at the newest modern
version; anything that is not positive evidence of a modern server (a JSON-RPC error, an
HTTP 4xx/5xx, a probe timeout, a result naming no modern version) falls back to the
``initialize`` handshake, except a -32022 whose ``supported`` list has no handshake version.

A server known to speak the handshake (its earlier sessions did: the registration's, stored
with the server, or this process's) gets ``initialize`` first, as its lifecycle requires;
only the first contact with a server probes before it knows."""

from __future__ import annotations

import time

from tenantry.errors import ToolUnavailable
from tenantry.tools._mcp_messages import (
    DISCOVER_TIMEOUT_S,
    HANDSHAKE_VERSIONS,
    MODERN_VERSIONS,
    UNSUPPORTED_PROTOCOL_VERSION,
    Headers,
    RpcError,
    Unauthorized,
    supported_versions,
)
from tenantry.tools._mcp_wire import Session

__all__ = ["negotiate"]


async def negotiate(session: Session, credentials: Headers = (),
                    limit_s: float = DISCOVER_TIMEOUT_S, *, modern: bool | None = None) -> None:
    """``modern``: what the server spoke when it was last negotiated with (None: unknown).
    False starts with the handshake — the 2025 lifecycle says ``initialize`` comes first —
    and probes only if the handshake names the server modern after all."""
    deadline = time.monotonic() + limit_s
    probe = modern is not False
    for attempt in range(2):
        if probe and await _probed_modern(session, deadline, credentials):
            return
        probe = True
        try:
            await session.initialize(deadline, credentials)
            return
        except Unauthorized as exc:
            raise _refused(session, exc) from None
        except RpcError as exc:
            # -32022 to the handshake names the server modern after all (e.g. a probe that
            # timed out here but locked the era there): probe once more.
            supported = supported_versions(exc)
            if exc.code != UNSUPPORTED_PROTOCOL_VERSION or attempt or not supported \
                    or not any(v in MODERN_VERSIONS for v in supported):
                raise session.unavailable(f"initialize failed: {exc.message}",
                                          reason="protocol") from None
    raise session.unavailable("protocol negotiation failed", reason="protocol")


async def _probed_modern(session: Session, deadline: float, credentials: Headers) -> bool:
    """Probe ``server/discover``: True once a modern version in common is adopted; False
    for anything that is no positive evidence of a modern server (try the handshake)."""
    try:
        result = await session.probe(deadline, credentials)
    except Unauthorized as exc:
        raise _refused(session, exc) from None
    except RpcError as exc:
        supported = supported_versions(exc)
        if supported is not None and exc.code == UNSUPPORTED_PROTOCOL_VERSION \
                and not any(v in HANDSHAKE_VERSIONS for v in supported):
            raise session.unavailable(f"no protocol version in common (server: {supported})",
                                      reason="protocol") from None
        return False
    except TimeoutError:
        return False  # a probe timing out is no evidence either way: try the handshake
    versions = result.get("supportedVersions")
    mutual = [v for v in MODERN_VERSIONS if isinstance(versions, list) and v in versions]
    if mutual:
        session.adopt_modern(mutual[-1])
        return True
    return False


def _refused(session: Session, exc: Unauthorized) -> ToolUnavailable:
    """The server wants a (better) credential before anything else: no era is tried after
    this one. ``www_authenticate`` says how to get one (tools/oauth/)."""
    return session.unavailable(f"the server refused the credential (HTTP {exc.http_status})",
                               reason="unauthorized", http_status=exc.http_status,
                               www_authenticate=exc.challenge)
