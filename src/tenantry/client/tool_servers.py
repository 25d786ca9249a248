"""The typed answers about a tenant's own tool servers and the vault secrets they send (the
routes ``/v1/tool-servers`` and ``/v1/secrets``), read from the API's JSON as the others
are (models.py: ``raw`` keeps the JSON, times are aware UTC ``datetime`` values).

A secret's value is write-only: no answer carries it, so no type here has a field for it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from tenantry.client.models import Json, _maybe_time, _time

__all__ = ["Secret", "ToolServer", "ToolServerConnection", "ToolServerOAuth"]


@dataclass(frozen=True, slots=True)
class Secret:
    """A secret of the tenant's vault: its name and dates, never its value."""

    name: str
    created_at: datetime
    updated_at: datetime
    raw: Json = field(default_factory=dict, repr=False, compare=False)

    @property
    def replaced(self) -> bool:
        """Its value has been replaced since it was first stored."""
        return self.updated_at > self.created_at

    @classmethod
    def from_json(cls, body: Json) -> Secret:
        return cls(str(body["name"]), _time(body["created_at"]), _time(body["updated_at"]),
                   raw=body)


@dataclass(frozen=True, slots=True)
class ToolServerOAuth:
    """An OAuth server's connection (never a token): ``status`` ``connected``, or
    ``authorization_required`` with the ``reason`` (until someone connects it again, calls
    to it are not made and the runs that need it wait)."""

    status: str
    reason: str | None
    grant: str
    scope: str | None
    issuer: str
    expires_at: datetime | None  # the access token's
    connected_at: datetime | None

    @property
    def connected(self) -> bool:
        return self.status == "connected"

    @classmethod
    def from_json(cls, body: Json) -> ToolServerOAuth:
        return cls(str(body["status"]), body.get("reason"), str(body.get("grant", "")),
                   body.get("scope"), str(body.get("issuer", "")),
                   _maybe_time(body.get("expires_at")), _maybe_time(body.get("connected_at")))


@dataclass(frozen=True, slots=True)
class ToolServer:
    """A tool server of the tenant: the tools it serves as pinned (the list reviewed, which
    models are offered), that list's digest, and how calls reach it. ``secret`` names the
    vault secret sent as its bearer token; ``oauth`` is set for a server that authorizes
    with OAuth (it has no tools until connected). ``registered_by``: ``tenant`` (with its
    key) or ``operator``."""

    server_id: str
    name: str
    url: str
    honours_idempotency_keys: bool
    secret: str | None
    tools: tuple[str, ...]
    tools_sha256: str
    call_timeout_seconds: int
    registered_by: str
    created_at: datetime
    oauth: ToolServerOAuth | None = None
    raw: Json = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, body: Json) -> ToolServer:
        oauth = body.get("oauth")
        return cls(
            server_id=str(body["server_id"]), name=str(body["name"]), url=str(body["url"]),
            honours_idempotency_keys=bool(body["honours_idempotency_keys"]),
            secret=body.get("secret"), tools=tuple(str(t) for t in body.get("tools") or ()),
            tools_sha256=str(body.get("tools_sha256", "")),
            call_timeout_seconds=int(body.get("call_timeout_seconds", 0)),
            # A platform from before tenants registered servers leaves it out: the operator's.
            registered_by=str(body.get("registered_by", "operator")),
            created_at=_time(body["created_at"]),
            oauth=ToolServerOAuth.from_json(oauth) if oauth else None, raw=body)


@dataclass(frozen=True, slots=True)
class ToolServerConnection:
    """The answer to ``connect``: where to send the browser of whoever authorizes the
    platform (None: connected at once, the client credentials grant), and the server."""

    authorization_url: str | None
    server: ToolServer
    raw: Json = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, body: Json) -> ToolServerConnection:
        return cls(body.get("authorization_url"), ToolServer.from_json(body["server"]),
                   raw=body)
