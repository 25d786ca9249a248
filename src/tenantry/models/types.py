"""What the engine asks a model and what it gets back, independent of any wire format."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol


@dataclass(frozen=True, slots=True)
class TokenUsage:
    """As the provider reported it; billing is computed from these numbers only."""

    input_tokens: int = 0
    output_tokens: int = 0
    cached_input_tokens: int = 0

    def to_json(self) -> dict[str, int]:
        return {
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cached_input_tokens": self.cached_input_tokens,
        }


@dataclass(frozen=True, slots=True)
class ModelToolCall:
    """A tool call exactly as the model wrote it: arguments stay raw text until the engine
    parses them, so a malformed call is recorded faithfully and answered with a tool error."""

    id: str
    name: str
    arguments: str

    def to_json(self) -> dict[str, str]:
        return {"id": self.id, "name": self.name, "arguments": self.arguments}


@dataclass(frozen=True, slots=True)
class ModelRequest:
    model: str
    messages: tuple[dict[str, Any], ...]
    tools: tuple[dict[str, Any], ...] = ()
    # Routing hints (sticky account per run, fair waiting) for the model gateway.
    run_key: str = ""


@dataclass(frozen=True, slots=True)
class ModelReply:
    text: str
    calls: tuple[ModelToolCall, ...]
    usage: TokenUsage
    provider: str
    account: str
    model: str
    latency_ms: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)


class Model(Protocol):
    """Anything that answers chat requests: a provider client or the whole gateway."""

    async def complete(self, request: ModelRequest) -> ModelReply: ...
