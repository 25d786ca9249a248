"""A stored row of a run's log (``Event``: ``data`` as stored, ``payload`` typed) and
how stored data is read back: every payload type by its name (``PAYLOADS``) and
``parse``, which leaves what this code cannot read to a newer worker."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from tenantry.runs.events import calls, lifecycle, tasks
from tenantry.runs.events.base import NewerEvent, Payload

#: Every payload type by its event type. ModelRequested is reserved:
#: nothing writes them yet, so no worker reads them either.
PAYLOADS: dict[str, type[Payload]] = {
    p.TYPE.value: p for family in (lifecycle, calls, tasks) for p in family.PAYLOAD_TYPES}


def parse(type: str, data: Mapping[str, Any], format: int = 1) -> Payload:
    """The typed payload of stored (or API) event data; ``NewerEvent`` if this code
    cannot read it."""
    kind = PAYLOADS.get(type)
    if kind is None or format > kind.FORMAT:
        raise NewerEvent(type, format)
    return kind.from_data(data)


@dataclass(frozen=True, slots=True)
class Event:
    """One stored row of a run's log: ``data`` as stored, ``payload`` typed."""

    seq: int
    type: str
    data: dict[str, Any]
    created_at: datetime
    format: int = 1

    @classmethod
    def of(cls, seq: int, payload: Payload, created_at: datetime) -> Event:
        return cls(seq, payload.TYPE, payload.to_data(), created_at, payload.FORMAT)

    @property
    def payload(self) -> Payload:
        return parse(self.type, self.data, self.format)

    def to_json(self) -> dict[str, Any]:
        return {
            "seq": self.seq,
            "type": self.type,
            "data": self.data,
            "created_at": self.created_at.isoformat(),
        }
