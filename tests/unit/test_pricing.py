"""Pricing: integer micro-dollars from provider-reported usage, exact and never under."""

from __future__ import annotations

from tenantry.ledger.pricing import DEFAULT_PRICES, Price, PriceTable
from tenantry.models.types import TokenUsage

TABLE = PriceTable("t", {"m": Price(3_000_000, 300_000, 15_000_000, cache_write_per_m=3_750_000),
                         "fam": Price(1_000_000, 100_000, 4_000_000)})


def test_each_kind_of_token_at_its_own_price() -> None:
    usage = TokenUsage(input_tokens=10_000, output_tokens=1_000, cached_input_tokens=6_000,
                       cache_write_input_tokens=2_000)
    # 2,000 plain input, 6,000 cache reads, 2,000 cache writes, 1,000 output.
    expected = (2_000 * 3 + 6_000 * 0.3 + 2_000 * 3.75 + 1_000 * 15)  # micro-dollars
    assert TABLE.cost_micros("m", usage) == expected == 30_300


def test_rounds_up_to_a_whole_micro_dollar_per_call() -> None:
    assert TABLE.cost_micros("fam", TokenUsage(input_tokens=1)) == 1
    assert TABLE.cost_micros("fam", TokenUsage()) == 0


def test_cache_writes_cost_plain_input_where_no_write_price_is_set() -> None:
    with_writes = TokenUsage(input_tokens=100, cache_write_input_tokens=100)
    assert TABLE.cost_micros("fam", with_writes) == TABLE.cost_micros(
        "fam", TokenUsage(input_tokens=100))


def test_families_share_a_price_and_unknown_models_have_none() -> None:
    assert TABLE.price("fam/large") == TABLE.price("fam")
    assert DEFAULT_PRICES.price("scripted/echo") == DEFAULT_PRICES.price("scripted")
    assert TABLE.price("nobody") is None
