"""Token counts, the values the ledger and the model gateway share: what a call used as its
provider reported it (:class:`TokenUsage`) and what a call is expected to use before it is
made (:func:`estimate_tokens`).

This module is a leaf (it imports nothing from tenantry) so the dependency between the two
points one way: ``models`` imports the ledger (an account's models must be priced), the
ledger never imports ``models`` — it prices and reserves for *any* call from these counts."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import orjson

#: What a reply is assumed to use in output tokens before it exists (when the request
#: sets no max_tokens).
ESTIMATED_OUTPUT_TOKENS = 1024


def estimate_tokens(
    messages: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]],
    max_tokens: int | None = None,
) -> tuple[int, int]:
    """(input, output) tokens a call is expected to use before it is made — about four
    bytes of prompt JSON per token, plus the reply's budget. Budgets and rate buckets are
    reserved with it and settled to the provider's count afterwards."""
    size = len(orjson.dumps(list(messages))) + len(orjson.dumps(list(tools)))
    return size // 4, max_tokens or ESTIMATED_OUTPUT_TOKENS


@dataclass(frozen=True, slots=True)
class TokenUsage:
    """As the provider reported it; billing is computed from these numbers only.

    ``input_tokens`` counts *every* prompt token, cached or not (OpenAI's ``prompt_tokens``;
    for Anthropic ``input_tokens + cache_read_input_tokens + cache_creation_input_tokens``).
    ``cached_input_tokens`` of them were read from the provider's prompt cache and
    ``cache_write_input_tokens`` were written to it (Anthropic bills those differently)."""

    input_tokens: int = 0
    output_tokens: int = 0
    cached_input_tokens: int = 0
    cache_write_input_tokens: int = 0

    def to_json(self) -> dict[str, int]:
        data = {
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cached_input_tokens": self.cached_input_tokens,
        }
        if self.cache_write_input_tokens:
            data["cache_write_input_tokens"] = self.cache_write_input_tokens
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> TokenUsage:
        return cls(
            input_tokens=int(data.get("input_tokens", 0)),
            output_tokens=int(data.get("output_tokens", 0)),
            cached_input_tokens=int(data.get("cached_input_tokens", 0)),
            cache_write_input_tokens=int(data.get("cache_write_input_tokens", 0)),
        )

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens
