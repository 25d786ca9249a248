"""Pricing: integer micro-dollars from provider-reported usage (and measured sandbox time),
exact and never under; an unpriced model has no price, never a price of 0."""

from __future__ import annotations

from tenantry.ledger.prices import PriceBook, default_for, defaults, how_to_price
from tenantry.ledger.pricing import (
    DEFAULT_PRICES,
    MAX_MICROS,
    SANDBOX,
    Price,
    PriceTable,
    SandboxPrice,
)
from tenantry.ledger.tokens import TokenUsage

TABLE = PriceTable("t", {"m": Price(3_000_000, 300_000, 15_000_000, cache_write_per_m=3_750_000),
                         "fam": Price(1_000_000, 100_000, 4_000_000)},
                   sandbox=SandboxPrice(per_second_micros=23))


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
    # Unpriced is not free: there is no cost to bill, and no quote to serve it with.
    assert TABLE.cost_micros("nobody", TokenUsage(input_tokens=5)) is None
    assert TABLE.quote("nobody") is None


def test_a_quote_names_the_price_that_applied() -> None:
    own, member = TABLE.quote("m"), TABLE.quote("fam/large")
    assert own is not None and own.version == "m@default-t" and own.priced_as == "m"
    assert member is not None and member.version == "fam@default-t"
    assert member.cost_micros(TokenUsage(output_tokens=1_000)) == 4_000


def test_sandbox_seconds_cost_per_started_micro_dollar() -> None:
    price = SandboxPrice(per_second_micros=23)
    assert price.cost_micros(1000) == 23
    assert price.cost_micros(1) == 1  # 0.023 rounds up: never bill less than was used
    assert price.cost_micros(0) == 0
    assert price.cost_micros(12_345) == 284  # 283.935 → 284
    assert TABLE.sandbox_quote().version == "sandbox@default-t"


def test_an_absurd_price_cannot_overflow_the_bill() -> None:
    huge = Price(MAX_MICROS, MAX_MICROS, MAX_MICROS)
    assert huge.cost_micros(TokenUsage(input_tokens=10**9, output_tokens=10**9)) == MAX_MICROS
    assert SandboxPrice(MAX_MICROS).cost_micros(10**9) == MAX_MICROS


def test_the_defaults_include_the_sandbox_under_its_reserved_name() -> None:
    names = [v.model for v in defaults()]
    assert names == sorted(names) and SANDBOX in names
    sandbox = default_for(SANDBOX)
    assert sandbox is not None and sandbox.sandbox == DEFAULT_PRICES.sandbox
    assert sandbox.source == "default" and sandbox.effective_from is None
    assert default_for("no-such-model") is None


async def test_a_book_without_a_database_bills_at_the_defaults() -> None:
    book = PriceBook(None)
    quote = await book.quote("scripted/echo")
    assert quote is not None and quote.price == DEFAULT_PRICES.prices["scripted"]
    assert await book.quote("meta-llama/Llama-3.1-8B-Instruct") is None
    assert await book.quote(SANDBOX) is None  # the sandbox's name is not a model
    assert (await book.sandbox()).price == DEFAULT_PRICES.sandbox


def test_the_refusal_says_how_to_price_a_model() -> None:
    message = how_to_price(["qwen2.5:7b"])
    assert "qwen2.5:7b" in message and "PUT /admin/v1/prices/qwen2.5:7b {" in message
    assert "input_per_m" in message and "output_per_m" in message
