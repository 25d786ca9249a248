"""Prices in integer micro-dollars: per million tokens for models, per second for sandbox
time. The built-in table here is the default; operators price any model (and the sandbox)
themselves, versioned (``ledger/prices.py``).

A cost is computed from provider-reported usage (or measured sandbox time) only, with
integer arithmetic, so the same usage always costs the same and sums are exact."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from tenantry.ledger.tokens import TokenUsage

#: The reserved price name for a second of sandbox time (``PUT /admin/v1/prices/sandbox``).
SANDBOX = "sandbox"
#: What a single cost may reach: the largest value a Postgres bigint column holds.
MAX_MICROS = 2**63 - 1


@dataclass(frozen=True, slots=True)
class Price:
    input_per_m: int
    cached_input_per_m: int
    output_per_m: int
    # Writing the prompt cache (Anthropic bills it above plain input); None: input price.
    cache_write_per_m: int | None = None

    def cost_micros(self, usage: TokenUsage) -> int:
        written = usage.cache_write_input_tokens
        plain = max(usage.input_tokens - usage.cached_input_tokens - written, 0)
        write_price = (self.input_per_m if self.cache_write_per_m is None
                       else self.cache_write_per_m)
        total = (
            plain * self.input_per_m
            + usage.cached_input_tokens * self.cached_input_per_m
            + written * write_price
            + usage.output_tokens * self.output_per_m
        )
        # Round up (never bill less than was used); an absurd price cannot overflow the bill.
        return min(-(-total // 1_000_000), MAX_MICROS)


@dataclass(frozen=True, slots=True)
class SandboxPrice:
    per_second_micros: int

    def cost_micros(self, sandbox_ms: int) -> int:
        return min(-(-max(sandbox_ms, 0) * self.per_second_micros // 1000), MAX_MICROS)


@dataclass(frozen=True, slots=True)
class Quote:
    """The price a call is billed at, and its identity (recorded with the call, so the
    bill says which version priced it): ``<priced name>@<effective_from>`` for an
    operator's version, ``<priced name>@default-<table version>`` for a built-in one."""

    priced_as: str  # the model, or its family when the family's price applied
    price: Price
    version: str
    effective_from: datetime | None = None  # None: a built-in default

    def cost_micros(self, usage: TokenUsage) -> int:
        return self.price.cost_micros(usage)


@dataclass(frozen=True, slots=True)
class SandboxQuote:
    price: SandboxPrice
    version: str
    effective_from: datetime | None = None

    def cost_micros(self, sandbox_ms: int) -> int:
        return self.price.cost_micros(sandbox_ms)


def family(model: str) -> str | None:
    """``scripted/echo`` belongs to ``scripted``: a family's price covers its members that
    have none of their own. None: the model has no family."""
    head, sep, _ = model.partition("/")
    return head if sep else None


@dataclass(frozen=True, slots=True)
class PriceTable:
    """The built-in defaults: a price for each model named, and the sandbox's."""

    version: str
    prices: dict[str, Price]
    sandbox: SandboxPrice

    def price(self, model: str) -> Price | None:
        if model in self.prices:
            return self.prices[model]
        head = family(model)
        return self.prices.get(head) if head else None

    def quote(self, model: str) -> Quote | None:
        for name in (model, family(model)):
            if name and name in self.prices:
                return Quote(name, self.prices[name], f"{name}@default-{self.version}")
        return None

    def sandbox_quote(self) -> SandboxQuote:
        return SandboxQuote(self.sandbox, f"{SANDBOX}@default-{self.version}")

    def cost_micros(self, model: str, usage: TokenUsage) -> int | None:
        """None: the model has no price here (it is never billed as free)."""
        price = self.price(model)
        return None if price is None else price.cost_micros(usage)


DEFAULT_PRICES = PriceTable(
    version="2026-12-01",
    prices={
        # The scripted provider is priced like a small hosted model so that cost limits and
        # billing are exercised end to end in tests and demos.
        "scripted": Price(input_per_m=1_000_000, cached_input_per_m=100_000,
                          output_per_m=4_000_000),
        "gpt-4o-mini": Price(150_000, 75_000, 600_000),
        "gpt-4o": Price(2_500_000, 1_250_000, 10_000_000),
        "claude-3-5-haiku": Price(800_000, 80_000, 4_000_000, cache_write_per_m=1_000_000),
        "claude-sonnet-4": Price(3_000_000, 300_000, 15_000_000, cache_write_per_m=3_750_000),
    },
    # The default sandbox (1 vCPU, 2 GiB) at E2B's published per-second rates for allocated
    # compute ($0.000014 per vCPU-second + $0.0000045 per GiB-second): $0.0828 an hour.
    sandbox=SandboxPrice(per_second_micros=23),
)
