"""Shedding under overload (ADR 0008): the cell's load, as a level, decides
what gives way first — new runs are delayed, then new batch runs refused, then every new
run refused. Steps of runs already in flight are never refused; they slow down last.

The level is the cell's queued depth (every tenant, agents and tasks) against three
thresholds. Each process reads the depth at most once per ``ttl_seconds``: a soft limit
does not need an exact count, and admission stays one query."""

from __future__ import annotations

import asyncio
import enum
import time
from dataclasses import dataclass, field

from tenantry.config import Settings
from tenantry.db import Database
from tenantry.db.queries import load
from tenantry.errors import ConfigurationError

Q = load(__package__)

#: Defaults of the first two levels, as fractions of the last (TENANTRY_MAX_QUEUED_RUNS).
DELAY_NEW_FRACTION = 0.5
REFUSE_BATCH_FRACTION = 0.8


class ShedLevel(enum.IntEnum):
    NORMAL = 0
    DELAY_NEW = 1      # new runs accepted; every in-flight step of every tenant goes first
    REFUSE_BATCH = 2   # ... and new batch runs are refused
    REFUSE_ALL = 3     # ... and new interactive runs too

    @property
    def in_flight_first(self) -> bool:
        return self >= ShedLevel.DELAY_NEW

    def refuses(self, priority: str) -> bool:
        """Would a new run of this priority be refused at this level?"""
        if self is ShedLevel.REFUSE_ALL:
            return True
        return self is ShedLevel.REFUSE_BATCH and priority == "batch"

    @property
    def shed_priorities(self) -> tuple[str, ...]:
        """The priorities of new runs refused at this level (what a refusal names)."""
        return {ShedLevel.REFUSE_BATCH: ("batch",),
                ShedLevel.REFUSE_ALL: ("batch", "interactive")}.get(self, ())


@dataclass(frozen=True, slots=True)
class ShedThresholds:
    """Queued runs in the cell at which each level starts (ascending)."""

    delay_new_at: int
    refuse_batch_at: int
    refuse_all_at: int

    def __post_init__(self) -> None:
        if not 1 <= self.delay_new_at <= self.refuse_batch_at <= self.refuse_all_at:
            raise ConfigurationError(
                "shedding thresholds must be 1 <= delay new runs <= refuse batch runs <= "
                f"max queued runs, got {self.delay_new_at}, {self.refuse_batch_at}, "
                f"{self.refuse_all_at}")

    @classmethod
    def derive(cls, refuse_all_at: int, refuse_batch_at: int | None = None,
               delay_new_at: int | None = None) -> ShedThresholds:
        """Fill the levels not given from the last one: delay at half of it, refuse batch
        at 80% — moved so they stay in order with any level that was given."""
        batch = refuse_batch_at
        if batch is None:
            batch = max(int(refuse_all_at * REFUSE_BATCH_FRACTION), delay_new_at or 1, 1)
            batch = min(batch, refuse_all_at)
        delay = delay_new_at
        if delay is None:
            delay = max(min(int(refuse_all_at * DELAY_NEW_FRACTION), batch), 1)
        return cls(delay, batch, refuse_all_at)

    @classmethod
    def of(cls, settings: Settings) -> ShedThresholds:
        return cls.derive(settings.max_queued_runs, settings.refuse_batch_runs_at,
                          settings.delay_new_runs_at)

    def level(self, depth: int) -> ShedLevel:
        if depth >= self.refuse_all_at:
            return ShedLevel.REFUSE_ALL
        if depth >= self.refuse_batch_at:
            return ShedLevel.REFUSE_BATCH
        if depth >= self.delay_new_at:
            return ShedLevel.DELAY_NEW
        return ShedLevel.NORMAL


@dataclass(slots=True)
class CellLoad:
    """The whole cell's load level as one process sees it: the depth is read at most once
    per ``ttl_seconds`` (0: on every call)."""

    db: Database
    thresholds: ShedThresholds
    ttl_seconds: float = 1.0
    depth: int = 0  # as last read: for the operator's side (logs, the library), never tenants
    _read_at: float = field(default=-1e9)
    # The read in flight: requests arriving meanwhile wait for it rather than each making
    # its own (at 1,000 runs/s an expired depth drew a read from every request in flight).
    _reading: asyncio.Future[None] | None = None

    async def level(self) -> ShedLevel:
        now = time.monotonic()
        if now - self._read_at >= self.ttl_seconds:
            if self._reading is None:
                self._reading = asyncio.ensure_future(self._read(now))
                self._reading.add_done_callback(self._read_done)
            await asyncio.shield(self._reading)
        return self.thresholds.level(self.depth)

    async def _read(self, now: float) -> None:
        async with self.db.unscoped() as conn:
            self.depth = int(await conn.fetchval(Q.queue_depth))
        self._read_at = now

    def _read_done(self, _: asyncio.Future[None]) -> None:
        self._reading = None


async def render(load: CellLoad) -> str:
    """``tenantry_shed_level`` for /metrics: the level this process answers new runs with."""
    level = await load.level()
    return ("# HELP tenantry_shed_level The cell's load level as this API process sees it: "
            "0 normal, 1 new runs delayed, 2 new batch runs refused, 3 every new run "
            "refused.\n# TYPE tenantry_shed_level gauge\n"
            f"tenantry_shed_level {int(level)}\n")
