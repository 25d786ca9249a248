"""How an account's capacity is divided among the worker processes using it (ADR 0021).

Pure arithmetic, no I/O: :mod:`tenantry.models.sharing` reads the holders of an account
from Postgres, and each holder computes its own share from the same rows.

A share is a fraction of the account. Each live holder first gets a floor (a tenth of the
account split evenly: a worker that was idle can start at once, but holds little), then the
rest goes by demand, in the engine's order: later steps of runs in flight first (max-min
fair over the holders), then first steps of new runs, max-min fair over *tenants* across
every holder (a tenant is served least cell-wide, not per process), each tenant's part
split over the holders that want it. What nobody wants is split evenly, so a burst finds
capacity before the next renewal.

A holder only ever writes its own share, and raises it only up to what the others leave
(:func:`next_share`), so the sum stays within the account while the holders renew at
different moments; one lowered by the division gives back at its own next renewal.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Demand", "Holder", "fill", "next_share", "reserve", "targets"]

# The floors together: a tenth of the account. What an idle worker holds while others
# are busy (wasted), and what a worker that turns busy has until its next renewal.
FLOOR_FRACTION = 0.1
# Tenants named in one holder's demand; the rest are summed under OTHERS.
MAX_TENANTS = 32
OTHERS = ""


@dataclass(frozen=True, slots=True)
class Demand:
    """What a holder wants, per minute, in the account's unit (requests; tokens for an
    account with a tpm only): ``in_flight`` for later steps of runs in flight, ``tenants``
    for first steps of new runs, by tenant."""

    in_flight: float = 0.0
    tenants: Mapping[str, float] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        top = sorted(self.tenants.items(), key=lambda kv: -kv[1])
        tenants = {t: round(v, 3) for t, v in top[:MAX_TENANTS] if v > 0}
        rest = sum(v for _, v in top[MAX_TENANTS:])
        if rest > 0:
            tenants[OTHERS] = round(tenants.get(OTHERS, 0.0) + rest, 3)
        return {"in_flight": round(self.in_flight, 3), "tenants": tenants}

    @classmethod
    def from_json(cls, data: Any) -> Demand:
        """A stored demand; anything unreadable counts as wanting nothing."""
        if not isinstance(data, dict):
            return cls()
        tenants = data.get("tenants")
        return cls(
            in_flight=_number(data.get("in_flight")),
            tenants={str(t): _number(v) for t, v in tenants.items()}
            if isinstance(tenants, dict) else {},
        )

    @property
    def total(self) -> float:
        return self.in_flight + sum(self.tenants.values())


@dataclass(frozen=True, slots=True)
class Holder:
    holder: str
    demand: Demand
    share: float  # the fraction of the account it holds now


def fill(capacity: float, wants: Sequence[float]) -> list[float]:
    """Max-min fair division (water filling): nobody gets more than it wants, and what one
    does not want goes to the others in equal parts."""
    given = [0.0] * len(wants)
    open_ = sorted((i for i, w in enumerate(wants) if w > 0), key=lambda i: wants[i])
    left = max(0.0, capacity)
    while open_ and left > 1e-12:
        level = left / len(open_)
        i = open_[0]
        if wants[i] <= level:  # the smallest want is met in full
            given[i] = wants[i]
            left -= wants[i]
            open_.pop(0)
            continue
        for j in open_:
            given[j] = level
        left = 0.0
    return given


def targets(holders: Sequence[Holder], limit: float) -> dict[str, float]:
    """The fraction of the account each holder should hold, given everyone's demand.
    ``limit`` is the account's usable capacity per minute, in the demand's unit."""
    if not holders:
        return {}
    if limit <= 0:
        return {h.holder: 0.0 for h in holders}
    n = len(holders)
    given = [limit * FLOOR_FRACTION / n] * n
    left = limit * (1 - FLOOR_FRACTION)
    # Runs in flight first.
    for i, extra in enumerate(fill(left, [h.demand.in_flight for h in holders])):
        given[i] += extra
        left -= extra
    # Then first steps: fair over tenants cell-wide, each tenant's part over its holders.
    by_tenant: dict[str, list[tuple[int, float]]] = defaultdict(list)
    for i, h in enumerate(holders):
        for tenant, want in h.demand.tenants.items():
            if want > 0:
                by_tenant[tenant].append((i, want))
    names = sorted(by_tenant)
    for tenant, part in zip(names, fill(left, [sum(w for _, w in by_tenant[t])
                                               for t in names]), strict=True):
        wanting = by_tenant[tenant]
        for (i, _), extra in zip(wanting, fill(part, [w for _, w in wanting]), strict=True):
            given[i] += extra
            left -= extra
    # Nobody wants the rest now: evenly, for whoever's burst comes first.
    if left > 0:
        given = [g + left / n for g in given]
    return {h.holder: min(1.0, g / limit) for h, g in zip(holders, given, strict=True)}


def next_share(target: float, held: float, others: float) -> float:
    """The share a holder takes at its renewal: down to its target at once; up only as far
    as the others' current shares allow (they give back at their own renewals)."""
    if target <= held:
        return max(0.0, target)
    # A hair under what is left: the sum of floats must not creep over 1.
    return max(held, min(target, 1.0 - others - 1e-9))


def reserve(limit: int, headroom: float) -> int:
    """How much of an account's limit is kept unused: ``headroom`` of it, at least one
    (request or token) unless ``headroom`` is 0, but never all of it — for each holder's
    one request in hand and the workers' clocks against the provider's (ADR 0021)."""
    if limit <= 1 or headroom <= 0:
        return 0
    return min(limit - 1, max(1, math.ceil(limit * headroom)))


def _number(value: Any) -> float:
    return float(value) if isinstance(value, int | float) and value > 0 else 0.0
