"""What the scripted model server asks of a provider's wire format (:class:`Wire`), and the
pieces every format shares. Each format lives in its own module: :mod:`.openai_wire` (the one
the platform serves) and the testing package's ``_anthropic_wire`` (tests only)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol

import orjson
from starlette.responses import Response

from tenantry.models.scripted import Reply


@dataclass(frozen=True, slots=True)
class Chat:
    """A chat request that passed its wire format's checks, in the OpenAI shape."""

    model: str
    messages: list[dict[str, Any]]
    tools: Any  # as sent: part of the prompt cache's key
    stream: bool = False  # answer as an event stream
    include_usage: bool = False  # OpenAI's stream_options.include_usage


class StreamPart(NamedTuple):
    """One server-sent event of a streamed reply, as bytes on the wire; ``content``: it
    carries a piece of the reply (text or a tool call), not framing."""

    data: bytes
    content: bool = False


class Wire(Protocol):
    base_path: str  # what a client appends to the origin for its base_url
    chat_path: str
    id_prefix: str
    malformed: bytes

    def error(self, status: int, message: str | None = None, *, param: str | None = None,
              code: str | None = None, headers: Mapping[str, str] | None = None) -> Response:
        """The provider's error body for ``status`` (a default message if none)."""
        ...

    def read(self, payload: Any) -> Chat | Response:
        """The chat request in ``payload``, or the provider's 400 answer to it."""
        ...

    def completion(self, completion_id: str, model: str, reply: Reply,
                   cached: int) -> dict[str, Any]: ...

    def stream(self, completion_id: str, model: str, reply: Reply, cached: int, *,
               include_usage: bool) -> list[StreamPart]:
        """The reply as the provider streams it: every event in order."""
        ...

    def without_content(self, completion_id: str, model: str) -> dict[str, Any]: ...

    def models(self, names: list[str]) -> dict[str, Any]: ...

    def limit_headers(self, limit: int, remaining: int, reset: float) -> dict[str, str]: ...


def json_response(status: int, body: Any, headers: Mapping[str, str] | None = None) -> Response:
    return Response(orjson.dumps(body), status, headers=dict(headers or {}),
                    media_type="application/json")


_PIECE = re.compile(r"\S*\s*")


def text_pieces(text: str) -> list[str]:
    """Text as a model streams it: a word and the space after it at a time (the pieces join
    back into ``text`` exactly)."""
    return [piece for piece in _PIECE.findall(text) if piece]


def argument_pieces(arguments: str, size: int = 8) -> list[str]:
    """A tool call's JSON arguments in the pieces a model streams them in."""
    return [arguments[i:i + size] for i in range(0, len(arguments), size)]
