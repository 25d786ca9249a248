"""Typed, prefixed identifiers, parsed once at the edge.

Run, agent and approval ids are UUIDv7 values (time-ordered, so indexes stay append-mostly
and ``ORDER BY run_id`` is creation order) shown as ``<prefix>_<32 hex>``. Tenant ids are
slugs: platform-created tenants get ``ten_<26 base32>``, and library users may bring their
own identity (``tenant-acme``). Anything ill-formed raises :class:`ValueError`; the API turns
that into the same 404 as a missing resource, because an id never grants or reveals anything.
"""

from __future__ import annotations

import os
import re
import time
import uuid
from dataclasses import dataclass
from typing import ClassVar, Self

_TENANT_RE = re.compile(r"^[a-z0-9][a-z0-9_-]{2,63}$")


def uuid7() -> uuid.UUID:
    """RFC 9562 UUIDv7: 48-bit Unix milliseconds, then random bits."""
    ms = time.time_ns() // 1_000_000
    rand = int.from_bytes(os.urandom(10), "big")
    value = (ms & ((1 << 48) - 1)) << 80 | rand & ((1 << 80) - 1)
    value = (value & ~(0xF << 76)) | (0x7 << 76)  # version 7
    value = (value & ~(0x3 << 62)) | (0x2 << 62)  # RFC 4122 variant
    return uuid.UUID(int=value)


@dataclass(frozen=True, slots=True)
class TenantId:
    value: str

    @classmethod
    def parse(cls, text: str) -> TenantId:
        if not isinstance(text, str) or not _TENANT_RE.fullmatch(text):
            raise ValueError("tenant id must be 3-64 chars of a-z, 0-9, '_' or '-'")
        return cls(text)

    @classmethod
    def new(cls) -> TenantId:
        import base64

        raw = base64.b32encode(uuid7().bytes).decode().rstrip("=").lower()
        return cls("ten_" + raw)

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True, slots=True)
class _PrefixedId:
    prefix: ClassVar[str]
    uuid: uuid.UUID

    @classmethod
    def parse(cls, text: str) -> Self:
        problem = f"{cls.prefix} id must look like {cls.prefix}_<32 hex digits>"
        head, sep, tail = text.partition("_") if isinstance(text, str) else ("", "", "")
        if not sep or head != cls.prefix or len(tail) != 32:
            raise ValueError(problem)
        try:
            return cls(uuid.UUID(hex=tail))
        except ValueError as exc:
            raise ValueError(problem) from exc

    @classmethod
    def new(cls) -> Self:
        return cls(uuid7())

    @classmethod
    def pattern(cls) -> str:
        """The ids of this kind as ``str`` writes them (lower-case hex), as a regex."""
        return rf"^{cls.prefix}_[0-9a-f]{{32}}$"

    def __str__(self) -> str:
        return f"{self.prefix}_{self.uuid.hex}"


class RunId(_PrefixedId):
    __slots__ = ()
    prefix = "run"


class AgentId(_PrefixedId):
    __slots__ = ()
    prefix = "agt"


class ApprovalId(_PrefixedId):
    __slots__ = ()
    prefix = "apr"


class ApiKeyId(_PrefixedId):
    __slots__ = ()
    prefix = "key"


class UserId(_PrefixedId):
    """One of a tenant's people, who signs in to the tenant console (ADR 0043 §5)."""

    __slots__ = ()
    prefix = "usr"


class OperatorId(_PrefixedId):
    """One of the platform operator's people, who signs in to the operator console with a
    role (ADR 0043 §8)."""

    __slots__ = ()
    prefix = "opr"


class AttemptId(_PrefixedId):
    """One attempt of an activity task (a sandbox is bound to it as to a run)."""

    __slots__ = ()
    prefix = "att"


class ReconciliationId(_PrefixedId):
    """One billing reconciliation (operator data)."""

    __slots__ = ()
    prefix = "rec"


class TestSetId(_PrefixedId):
    """An agent's test set (ADR 0034)."""

    __slots__ = ()
    __test__ = False  # not a pytest test class, whatever its name says
    prefix = "tset"


class EvaluationId(_PrefixedId):
    """One evaluation of a candidate against a baseline on a test set (ADR 0034)."""

    __slots__ = ()
    prefix = "eval"


class ExportId(_PrefixedId):
    """One export of a tenant's data (ADR 0044)."""

    __slots__ = ()
    prefix = "exp"


class WebhookEndpointId(_PrefixedId):
    """A tenant's webhook endpoint (ADR 0045)."""

    __slots__ = ()
    prefix = "whe"


class WebhookDeliveryId(_PrefixedId):
    """One attempt to deliver a run's end, in the tenant's delivery history (ADR 0045)."""

    __slots__ = ()
    prefix = "whd"
