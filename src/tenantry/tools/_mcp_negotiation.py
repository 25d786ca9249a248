"""Which protocol generation a new MCP session speaks, negotiated as the official SDK's
``mode="auto"`` does (mcp/client/_probe.py): probe ``server/discover`` at the newest modern
version; anything that is not positive evidence of a modern server (a JSON-RPC error, an
HTTP 4xx/5xx, a probe timeout, a result naming no modern version) falls back to the
``initialize`` handshake, except a -32022 whose ``supported`` list has no handshake version.
"""

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
                    limit_s: float = DISCOVER_TIMEOUT_S) -> None:
    deadline = time.monotonic() + limit_s
    for attempt in range(2):
        try:
            result = await session.probe(deadline, credentials)
        except Unauthorized as exc:
            raise _refused(session, exc) from None
        except RpcError as exc:
            supported = supported_versions(exc)
            if supported is not None and exc.code == UNSUPPORTED_PROTOCOL_VERSION \
                    and not any(v in HANDSHAKE_VERSIONS for v in supported):
                raise session.unavailable(
                    f"no protocol version in common (server: {supported})",
                    reason="protocol") from None
        except TimeoutError:
            pass  # a probe timing out is no evidence either way: try the handshake
        else:
            versions = result.get("supportedVersions")
            mutual = [v for v in MODERN_VERSIONS
                      if isinstance(versions, list) and v in versions]
            if mutual:
                session.adopt_modern(mutual[-1])
                return
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


def _refused(session: Session, exc: Unauthorized) -> ToolUnavailable:
    """The server wants a (better) credential before anything else: no era is tried after
    this one. ``www_authenticate`` says how to get one (tools/oauth/)."""
    return session.unavailable(f"the server refused the credential (HTTP {exc.http_status})",
                               reason="unauthorized", http_status=exc.http_status,
                               www_authenticate=exc.challenge)
