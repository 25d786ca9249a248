"""Refused egress attempts, kept by the proxy until whoever records them takes them.

The proxy (``proxy.py``) notes every refusal of an attempt to get out — a host off the
allow-list, an internal or a metadata address — under the (tenant, run) its sandbox is
bound to (an activity attempt's sandbox is bound to the attempt's id). Two callers take
them: a run's tool step after each built-in tool call (recorded as ``EgressRefused``
events) and the activity dispatcher when an attempt ends (recorded on the attempt). A
take frees what it returns.

Kept is what the code asked for (host, port) and a reason code; never the addresses a
name resolved to.

Bounded per process whatever callers do, so a caller that forgets to take (or a sandbox
that goes on trying after its last take) cannot grow it:

- per (tenant, run): the first ``MAX_REFUSALS_KEPT``; later ones are only counted;
- in all: ``MAX_REFUSALS_HELD`` kept across every key; past it the oldest kept refusal of
  the key that has held its refusals longest is dropped and counted under its key (a take
  still reports it, by reason code);
- keys: ``MAX_RUNS_KEPT``; past it the key held longest is dropped whole, and its count
  is added to ``lost`` (and logged): nobody can be told about those any more.

A kept refusal takes at most ~350 bytes (a host is at most ~200 printable characters) and
a key at most ~700, so what this holds stays under ``MAX_HELD_BYTES`` (4 MiB; ~3 MiB
measured at the worst, by ``tests/unit/test_egress_refusals_kept.py``).
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from dataclasses import dataclass, field

log = logging.getLogger(__name__)

#: Reason codes: bounded, so they can be metric labels too.
NOT_ALLOWED = "not_allowed"  # the host:port is not on the run's allow-list
INTERNAL_ADDRESS = "internal_address"  # an internal address (named, or what a name resolves to)
METADATA_ADDRESS = "metadata_address"  # a link-local address, where cloud metadata lives
REASON_CODES = (NOT_ALLOWED, INTERNAL_ADDRESS, METADATA_ADDRESS)

#: Refusals kept per (tenant, run) between two takes; beyond them only counted.
MAX_REFUSALS_KEPT = 1000
#: Refusals kept across every (tenant, run); beyond them the oldest are dropped (counted).
MAX_REFUSALS_HELD = 4096
#: (tenant, run) keys with refusals not yet taken (ten times the sandboxes a worker runs at
#: its design point); beyond them the oldest key goes whole.
MAX_RUNS_KEPT = 2048
#: What the kept refusals may take in memory, at most (see the module docstring).
MAX_HELD_BYTES = 4 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class EgressRefusal:
    """One egress attempt the proxy refused: the host and port the code asked for (the
    tenant's own data) and why, as a reason code."""

    host: str
    port: int
    reason_code: str


@dataclass(frozen=True, slots=True)
class TakenRefusals:
    """What one take returned: the refusals kept, oldest first, and how many more were
    refused but not kept, by reason code."""

    kept: tuple[EgressRefusal, ...] = ()
    dropped: dict[str, int] = field(default_factory=dict)

    @property
    def total(self) -> int:
        return len(self.kept) + sum(self.dropped.values())

    def by_reason(self) -> dict[str, int]:
        """Every refused attempt, kept or not, counted by reason code."""
        counts = dict(self.dropped)
        for refusal in self.kept:
            counts[refusal.reason_code] = counts.get(refusal.reason_code, 0) + 1
        return {code: counts[code] for code in REASON_CODES if counts.get(code)}


@dataclass(frozen=True, slots=True)
class HeldRefusals:
    """What is held now (for a tenant, or for everyone): keys with refusals not yet taken,
    refusals kept in memory, and refused attempts a take would report (kept + counted)."""

    keys: int = 0
    kept: int = 0
    refused: int = 0


@dataclass(slots=True)
class _Entry:
    kept: list[EgressRefusal] = field(default_factory=list)
    dropped: dict[str, int] | None = None  # created at the first refusal not kept

    def drop(self, reason_code: str) -> None:
        if self.dropped is None:
            self.dropped = {}
        self.dropped[reason_code] = self.dropped.get(reason_code, 0) + 1

    @property
    def refused(self) -> int:
        return len(self.kept) + (sum(self.dropped.values()) if self.dropped else 0)


class KeptRefusals:
    """The proxy's refusals between note and take; bounded as the module docstring says."""

    def __init__(self) -> None:
        # In the order keys were first noted since their last take (the oldest goes first
        # past MAX_RUNS_KEPT).
        self._entries: OrderedDict[tuple[str, str], _Entry] = OrderedDict()
        # Keys that keep at least one refusal, in the order they started keeping: past
        # MAX_REFUSALS_HELD the first one gives up its oldest (no scan over empty keys).
        self._holding: OrderedDict[tuple[str, str], None] = OrderedDict()
        self._kept = 0
        self.lost = 0  # refused attempts dropped with their whole key: never reported
        self._keys_lost = 0

    def note(self, tenant: str, run: str, refusal: EgressRefusal) -> None:
        key = (tenant, run)
        entry = self._entries.get(key)
        if entry is None:
            entry = self._entries[key] = _Entry()
            while len(self._entries) > MAX_RUNS_KEPT:
                self._forget_oldest_key()
        if len(entry.kept) >= MAX_REFUSALS_KEPT:
            entry.drop(refusal.reason_code)
            return
        if not entry.kept:
            self._holding[key] = None
        entry.kept.append(refusal)
        self._kept += 1
        while self._kept > MAX_REFUSALS_HELD:
            self._drop_oldest_kept()

    def take(self, tenant: str, run: str) -> TakenRefusals:
        """The refusals noted for this key since its last take; they are freed here."""
        key = (tenant, run)
        entry = self._entries.pop(key, None)
        if entry is None:
            return TakenRefusals()
        self._holding.pop(key, None)
        self._kept -= len(entry.kept)
        return TakenRefusals(tuple(entry.kept), dict(entry.dropped or {}))

    def held(self, tenant: str | None = None) -> HeldRefusals:
        entries = [e for (owner, _), e in self._entries.items()
                   if tenant is None or owner == tenant]
        return HeldRefusals(len(entries), sum(len(e.kept) for e in entries),
                            sum(e.refused for e in entries))

    def _drop_oldest_kept(self) -> None:
        key = next(iter(self._holding))
        entry = self._entries[key]
        oldest = entry.kept.pop(0)
        entry.drop(oldest.reason_code)
        self._kept -= 1
        if not entry.kept:
            del self._holding[key]

    def _forget_oldest_key(self) -> None:
        (tenant, run), entry = self._entries.popitem(last=False)
        self._holding.pop((tenant, run), None)
        self._kept -= len(entry.kept)
        self.lost += entry.refused
        self._keys_lost += 1
        if self._keys_lost % 1000 == 1:  # a flood of keys is one line per thousand
            log.warning("egress refusals never taken: dropped with their run", extra={
                "tenant_id": tenant, "run_id": run, "refused": entry.refused,
                "runs_dropped": self._keys_lost, "refusals_dropped": self.lost})
