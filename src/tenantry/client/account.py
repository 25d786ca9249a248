"""The typed answers about the tenant's own account: its API keys (``/v1/api-keys``), its
audit trail (``/v1/audit``) and its people (``/v1/users``), read from the API's JSON as the
others are (models.py: ``raw`` keeps the JSON, times are aware UTC ``datetime`` values).

A key's secret is in one answer only, the one that made it (:class:`IssuedApiKey`); a
sign-in link's token likewise (:class:`SignInLink`). Neither is in a ``repr``."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from tenantry.client.models import Json, _maybe_time, _time

__all__ = ["ApiKey", "AuditEntry", "IssuedApiKey", "SignInLink", "User"]


@dataclass(frozen=True, slots=True)
class ApiKey:
    """A key of the tenant: what it may do and until when; never the key itself.
    ``created_by``: ``operator``, ``key:<key id>`` or ``user:<id>``."""

    key_id: str
    prefix: str
    name: str
    scopes: tuple[str, ...]
    created_at: datetime
    expires_at: datetime | None
    revoked_at: datetime | None
    created_by: str | None
    replaces: str | None
    raw: Json = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, body: Json) -> ApiKey:
        return cls(str(body["key_id"]), str(body["prefix"]), str(body.get("name", "")),
                   tuple(str(s) for s in body.get("scopes") or ()), _time(body["created_at"]),
                   _maybe_time(body.get("expires_at")), _maybe_time(body.get("revoked_at")),
                   body.get("created_by"), body.get("replaces"), raw=body)


@dataclass(frozen=True, slots=True)
class IssuedApiKey:
    """A key just made or rotated: ``api_key`` is shown this once."""

    api_key: str = field(repr=False)
    key: ApiKey

    @classmethod
    def from_json(cls, body: Json) -> IssuedApiKey:
        return cls(str(body["api_key"]), ApiKey.from_json(body))


@dataclass(frozen=True, slots=True)
class AuditEntry:
    """An entry of the audit trail: a ``tool_call`` (``run_id``, ``tool``, ``server``,
    ``key``, ``arguments_sha256``, ``outcome``) or a ``change`` to the account (``actor``,
    ``action``, ``target``, ``status``)."""

    kind: str
    id: str
    at: datetime
    actor: str | None = None
    action: str | None = None
    target: str | None = None
    status: int | None = None
    run_id: str | None = None
    tool: str | None = None
    server: str | None = None
    key: str | None = None
    arguments_sha256: str | None = None
    outcome: str | None = None
    detail: str | None = None
    raw: Json = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, body: Json) -> AuditEntry:
        return cls(str(body["kind"]), str(body["id"]), _time(body["at"]), body.get("actor"),
                   body.get("action"), body.get("target"), body.get("status"),
                   body.get("run_id"), body.get("tool"), body.get("server"), body.get("key"),
                   body.get("arguments_sha256"), body.get("outcome"), body.get("detail"),
                   raw=body)


@dataclass(frozen=True, slots=True)
class User:
    """A person of the tenant (ADR 0043 §5): a ``role`` (``viewer``, ``approver``,
    ``developer``, ``admin``) and the ``scopes`` it gives them in the tenant console.
    ``created_by``: ``operator``, ``key:<key id>`` or ``user:<id>``; a disabled user stays
    listed."""

    user_id: str
    email: str
    role: str
    scopes: tuple[str, ...]
    created_by: str
    created_at: datetime
    disabled_at: datetime | None
    raw: Json = field(default_factory=dict, repr=False, compare=False)

    @property
    def disabled(self) -> bool:
        return self.disabled_at is not None

    @classmethod
    def from_json(cls, body: Json) -> User:
        return cls(str(body["user_id"]), str(body["email"]), str(body["role"]),
                   tuple(str(s) for s in body.get("scopes") or ()),
                   str(body.get("created_by", "")), _time(body["created_at"]),
                   _maybe_time(body.get("disabled_at")), raw=body)


@dataclass(frozen=True, slots=True)
class SignInLink:
    """A one-time link that signs a user in to the tenant console: used once, before
    ``expires_at``. Shown this once (its token is part of ``url``)."""

    url: str = field(repr=False)
    expires_at: datetime
    raw: Json = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, body: Json) -> SignInLink:
        return cls(str(body["url"]), _time(body["expires_at"]), raw=body)
