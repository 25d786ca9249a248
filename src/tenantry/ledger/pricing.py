"""Model prices, versioned, in integer micro-dollars per million tokens.

``cost_micros`` is computed from provider-reported usage only, with integer arithmetic, so
the same usage always costs the same and sums are exact."""

from __future__ import annotations

from dataclasses import dataclass

from tenantry.models.types import TokenUsage


@dataclass(frozen=True, slots=True)
class Price:
    input_per_m: int
    cached_input_per_m: int
    output_per_m: int
    # Writing the prompt cache (Anthropic bills it above plain input); None: input price.
    cache_write_per_m: int | None = None


@dataclass(frozen=True, slots=True)
class PriceTable:
    version: str
    prices: dict[str, Price]

    def price(self, model: str) -> Price | None:
        if model in self.prices:
            return self.prices[model]
        # "scripted/<name>" and similar families share the family's price.
        family = model.split("/", 1)[0]
        return self.prices.get(family)

    def cost_micros(self, model: str, usage: TokenUsage) -> int:
        price = self.price(model)
        if price is None:
            return 0
        written = usage.cache_write_input_tokens
        plain = max(usage.input_tokens - usage.cached_input_tokens - written, 0)
        write_price = (price.input_per_m if price.cache_write_per_m is None
                       else price.cache_write_per_m)
        total = (
            plain * price.input_per_m
            + usage.cached_input_tokens * price.cached_input_per_m
            + written * write_price
            + usage.output_tokens * price.output_per_m
        )
        return -(-total // 1_000_000)  # round up: never bill less than was used


DEFAULT_PRICES = PriceTable(
    version="2026-11-29",
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
)
