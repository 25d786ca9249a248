"""The operator's prices (``model_prices``): versions stored, and the book a worker bills by.

Each version is in force from its ``effective_from`` until the next; a model with none in
force bills at the built-in default (``pricing.DEFAULT_PRICES``), and a model with neither
is unpriced — never served, never billed as free. Versions are immutable and never start
in the past, so a past call's price is the one the table says was in force, and its cost,
stored with the call, never changes.

A worker's :class:`PriceBook` caches the current and scheduled versions and reloads them at
most ``refresh_seconds`` (5 s) after its last load, on the next lookup: a price PUT with an
``effective_from`` at least that far ahead applies from exactly that time; one from "now"
applies in every worker within 5 s (calls in between are billed, and say so, at the
previous version). A lookup that finds no price at all reloads first, so a model priced
just before its account was registered is served at once."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import asyncpg

from tenantry.db import Database
from tenantry.db.queries import load
from tenantry.errors import Conflict
from tenantry.ledger.pricing import (
    DEFAULT_PRICES,
    SANDBOX,
    Price,
    PriceTable,
    Quote,
    SandboxPrice,
    SandboxQuote,
    family,
)

Q = load(__package__)

#: Where to price a model, for messages that tell an operator how.
PRICE_ROUTE = "PUT /admin/v1/prices/{model}"


def how_to_price(models: Iterable[str]) -> str:
    """The refusal for unpriced models, saying exactly how to price each."""
    names = list(models)
    routes = ", ".join(PRICE_ROUTE.format(model=m) for m in names)
    return (f"no price for {', '.join(names)}; the operator prices it with {routes} "
            '{"input_per_m": ..., "cached_input_per_m": ..., "output_per_m": ...} '
            "(micro-dollars per million tokens) before it can be served")


@dataclass(frozen=True, slots=True)
class PriceVersion:
    """One version of a name's price: token prices for a model, ``sandbox`` for the
    sandbox's per-second price. ``effective_from`` None: the built-in default."""

    model: str
    effective_from: datetime | None
    price: Price | None = None
    sandbox: SandboxPrice | None = None
    created_at: datetime | None = None
    default_version: str = DEFAULT_PRICES.version

    @property
    def source(self) -> str:
        return "default" if self.effective_from is None else "operator"

    @property
    def version(self) -> str:
        if self.effective_from is None:
            return f"{self.model}@default-{self.default_version}"
        return f"{self.model}@{self.effective_from.astimezone(UTC).isoformat()}"

    @classmethod
    def from_row(cls, row: asyncpg.Record) -> PriceVersion:
        price = sandbox = None
        if row["per_second_micros"] is not None:
            sandbox = SandboxPrice(int(row["per_second_micros"]))
        else:
            price = Price(int(row["input_per_m"]), int(row["cached_input_per_m"]),
                          int(row["output_per_m"]), row["cache_write_per_m"])
        return cls(row["model"], row["effective_from"], price, sandbox, row["created_at"])

    def to_json(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self.model, "source": self.source, "version": self.version,
            "effective_from": self.effective_from.isoformat() if self.effective_from else None,
            "created_at": self.created_at.isoformat() if self.created_at else None,
            "input_per_m": None, "cached_input_per_m": None, "cache_write_per_m": None,
            "output_per_m": None, "per_second_micros": None,
        }
        if self.price is not None:
            body.update(input_per_m=self.price.input_per_m,
                        cached_input_per_m=self.price.cached_input_per_m,
                        cache_write_per_m=self.price.cache_write_per_m,
                        output_per_m=self.price.output_per_m)
        if self.sandbox is not None:
            body["per_second_micros"] = self.sandbox.per_second_micros
        return body

    def same_price(self, other: PriceVersion) -> bool:
        return (self.price, self.sandbox) == (other.price, other.sandbox)


def defaults(table: PriceTable = DEFAULT_PRICES) -> list[PriceVersion]:
    """The built-in table as versions (the sandbox's included), by name."""
    rows = [PriceVersion(name, None, price, default_version=table.version)
            for name, price in table.prices.items()]
    rows.append(PriceVersion(SANDBOX, None, sandbox=table.sandbox,
                             default_version=table.version))
    return sorted(rows, key=lambda v: v.model)


def default_for(model: str, table: PriceTable = DEFAULT_PRICES) -> PriceVersion | None:
    return next((v for v in defaults(table) if v.model == model), None)


# -- the operator API's store ---------------------------------------------------------------


async def put(db: Database, new: PriceVersion, *, at_now: bool) -> tuple[PriceVersion, bool]:
    """Store a new version (``at_now``: effective from the database's now). Returns it and
    whether it was created; the same version PUT again is answered as it is, a different
    price for an existing version is a conflict, and so is a start in the past."""
    price, sandbox = new.price, new.sandbox
    args = (price.input_per_m if price else None, price.cached_input_per_m if price else None,
            price.cache_write_per_m if price else None, price.output_per_m if price else None,
            sandbox.per_second_micros if sandbox else None)
    async with db.unscoped() as conn:
        row = await conn.fetchrow(Q.insert_price, new.model,
                                  None if at_now else new.effective_from, *args)
        if row is not None:
            return PriceVersion.from_row(row), True
        existing = None if at_now else await conn.fetchrow(Q.price_at, new.model,
                                                           new.effective_from)
    if existing is None:
        if at_now:
            raise Conflict("A price version for this model starts at this instant; retry.")
        # Not a malformed request: the time it names has passed, and calls were billed.
        raise Conflict(
            "effective_from: must not be in the past (a call already billed keeps the price "
            "it was billed at); omit it to price from now", field="effective_from")
    stored = PriceVersion.from_row(existing)
    if not stored.same_price(new):
        raise Conflict(f"{stored.model} already has a different price from "
                       f"{stored.effective_from}; versions never change: PUT a new one with "
                       "a later effective_from")
    return stored, False


async def history(db: Database, model: str, limit: int) -> list[PriceVersion]:
    """The operator's versions of ``model``, newest first."""
    async with db.unscoped() as conn:
        rows = await conn.fetch(Q.price_history, model, limit)
    return [PriceVersion.from_row(r) for r in rows]


async def in_force_page(db: Database, after: str | None, limit: int) -> list[PriceVersion]:
    """Each name's price in force now (the operator's, else the built-in default), by name,
    after ``after``."""
    async with db.unscoped() as conn:
        rows = await conn.fetch(Q.prices_in_force_page, after, limit)
    merged = {v.model: v for v in defaults() if after is None or v.model > after}
    merged.update((v.model, v) for v in map(PriceVersion.from_row, rows))
    return [merged[name] for name in sorted(merged)][:limit]


# -- what a worker bills by -----------------------------------------------------------------


class PriceBook:
    """The prices a worker bills by: the operator's versions (cached, reloaded as the module
    says) over the built-in defaults. ``db`` None: the defaults alone."""

    def __init__(self, db: Database | None, *, table: PriceTable = DEFAULT_PRICES,
                 refresh_seconds: float = 5.0) -> None:
        self._db = db
        self._table = table
        self.refresh_seconds = refresh_seconds
        self._versions: dict[str, list[PriceVersion]] = {}
        self._loaded_at: float | None = None
        self._lock = asyncio.Lock()

    async def refresh(self) -> None:
        """Load the operator's current and scheduled versions (a database error propagates:
        billing at a guessed price is worse than a step that waits for the database)."""
        await self._reload(since=time.monotonic())

    async def _reload(self, *, since: float) -> None:
        """Load, unless a load that started after ``since`` (monotonic) finished while this
        one waited: lookups that find the book stale together share one load."""
        if self._db is None:
            return
        async with self._lock:
            if self._loaded_at is not None and self._loaded_at > since:
                return
            started = time.monotonic()
            async with self._db.unscoped() as conn:
                rows = await conn.fetch(Q.prices_in_force_and_later)
            versions: dict[str, list[PriceVersion]] = {}
            for version in sorted(map(PriceVersion.from_row, rows),
                                  key=lambda v: (v.model, v.effective_from)):
                versions.setdefault(version.model, []).append(version)
            self._versions = versions
            self._loaded_at = started  # what was loaded is at least as new as this

    async def _fresh(self) -> None:
        """Reload if what is loaded is older than ``refresh_seconds``."""
        now, loaded = time.monotonic(), self._loaded_at
        if loaded is None or now - loaded >= self.refresh_seconds:
            await self._reload(since=now - self.refresh_seconds)

    def _in_force(self, name: str, at: datetime) -> PriceVersion | None:
        current = None
        for version in self._versions.get(name, ()):
            assert version.effective_from is not None
            if version.effective_from > at:
                break
            current = version
        return current

    def _lookup(self, model: str, at: datetime) -> Quote | None:
        """The model's own price before its family's; at each, the operator's before the
        default."""
        for name in (model, family(model)):
            if not name or name == SANDBOX:
                continue
            operator = self._in_force(name, at)
            if operator is not None and operator.price is not None:
                return Quote(name, operator.price, operator.version, operator.effective_from)
            if name in self._table.prices:
                return self._table.quote(name)
        return None

    async def quote(self, model: str, *, at: datetime | None = None) -> Quote | None:
        """The price a call to ``model`` made at ``at`` (default now) is billed at; None:
        the model is unpriced."""
        began = time.monotonic()
        await self._fresh()
        when = at or datetime.now(UTC)
        quote = self._lookup(model, when)
        if quote is None and self._db is not None:
            # A price PUT before this lookup began is seen: by a load started since then.
            await self._reload(since=began)
            quote = self._lookup(model, when)
        return quote

    async def is_priced(self, model: str) -> bool:
        return await self.quote(model) is not None

    async def sandbox(self, *, at: datetime | None = None) -> SandboxQuote:
        """The price of sandbox time now (the operator's ``sandbox`` version, else the
        default)."""
        await self._fresh()
        version = self._in_force(SANDBOX, at or datetime.now(UTC))
        if version is not None and version.sandbox is not None:
            return SandboxQuote(version.sandbox, version.version, version.effective_from)
        return self._table.sandbox_quote()
