"""The built-in scripted model: a loopback HTTP server answering from
:mod:`tenantry.models.scripted` scripts in OpenAI's chat completions wire format.

The platform serves the ``scripted`` models from it when TENANTRY_MODEL_BASE_URL is unset
(demos, local development); the testing package's ``FakeModelServer`` builds on it with
what only tests need (faults, rate limits, recorded requests, usage reports, Anthropic's
wire format).

It speaks ``POST /v1/chat/completions``, whole or streamed (``stream: true``: the reply a
word at a time, see :mod:`~tenantry.models.openai_wire`; ``chunk_delay_ms`` apart, so a
client can be seen reading a reply as it is written), and ``GET /v1/models``. Which script
answers is decided by :func:`~tenantry.models.scripted.select_script`.

Prompt cache (deterministic): the server remembers every prefix of at least two messages of
the conversations it answered (per model and tool list). A request whose longest such prefix
was seen before reports that prefix's :func:`~tenantry.models.scripted.prompt_tokens` as
cached (a step's ``usage`` override caps it). The cache belongs to the server, as a
provider's belongs to an account: a run that moves to another account loses it.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import math
import uuid
from collections.abc import AsyncIterator, Mapping

import orjson
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import BaseRoute, Route
from starlette.types import ASGIApp

from tenantry.cache import BoundedCache
from tenantry.models.loopback import LoopbackService
from tenantry.models.openai_wire import OpenAIWire
from tenantry.models.scripted import (
    Reply,
    Script,
    ScriptError,
    UnknownModel,
    Usage,
    prompt_tokens,
    select_script,
)
from tenantry.models.wire import Chat, StreamPart, Wire, json_response

__all__ = ["PromptCache", "ScriptedModelServer"]

# Prefixes the prompt cache keeps (least recently used forgotten first): bounds a long
# benchmark's memory; a test never comes near it.
_CACHE_ENTRIES = 200_000


class ScriptedModelServer(LoopbackService):
    """``async with ScriptedModelServer(scripts) as model``: ``model.base_url`` is what a
    model account (or the provider's SDK) takes as ``base_url``."""

    def __init__(
        self,
        scripts: Mapping[str, Script] | None = None,
        *,
        wire: Wire | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        handle_signals: bool = False,
        chunk_delay_ms: float = 0.0,
    ) -> None:
        if chunk_delay_ms < 0:
            raise ValueError("chunk_delay_ms must be >= 0")
        self.scripts: dict[str, Script] = dict(scripts or {})
        # A streamed reply waits this long between two of its pieces (text or tool call).
        self.chunk_delay_ms = chunk_delay_ms
        super().__init__(host=host, port=port, handle_signals=handle_signals)
        self._wire: Wire = wire if wire is not None else OpenAIWire()
        self._cache = PromptCache()
        self._stopping = asyncio.Event()
        self.app = Starlette(routes=self._routes())

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:PORT/v1`` on OpenAI's wire (the origin on Anthropic's)."""
        return f"{self.origin}{self._wire.base_path}"

    def _app(self) -> ASGIApp:
        return self.app

    async def start(self) -> None:
        self._stopping = asyncio.Event()
        await super().start()

    async def stop(self) -> None:
        # A scripted delay ends now: its caller is gone or going (the worker cancelled its
        # call), and a reply still sleeping past the shutdown grace would be cancelled by
        # uvicorn with an ERROR traceback in the platform's log.
        self._stopping.set()
        await super().stop()

    def _routes(self) -> list[BaseRoute]:
        return [Route(self._wire.chat_path, self._chat, methods=["POST"]),
                Route("/v1/models", self._models, methods=["GET"])]

    # ------------------------------------------------------------------ handlers

    async def _body(self, request: Request) -> bytes:
        """The request's body (a subclass may record the request here)."""
        return await request.body()

    async def _models(self, request: Request) -> Response:
        await self._body(request)
        return self._model_list()

    def _model_list(self) -> Response:
        names = ["scripted", "scripted/echo", *(f"scripted/{n}" for n in self.scripts)]
        return json_response(200, self._wire.models(list(dict.fromkeys(names))))

    async def _chat(self, request: Request) -> Response:
        return await self._answer(await self._body(request))

    async def _answer(self, body: bytes) -> Response:
        """The scripted reply to a chat request's ``body``, or the provider's error."""
        wire = self._wire
        try:
            payload = orjson.loads(body)
        except orjson.JSONDecodeError:
            return wire.error(400, "We could not parse the JSON body of your request.")
        chat = wire.read(payload)
        if isinstance(chat, Response):
            return chat
        try:
            reply = select_script(chat.model, chat.messages, self.scripts).reply(chat.messages)
        except UnknownModel as exc:
            return wire.error(404, exc.detail, param="model", code="model_not_found")
        except ScriptError as exc:
            return wire.error(400, exc.detail, param="messages")

        if reply.delay_ms and not await self._delay(reply.delay_ms / 1000):
            return wire.error(503, "The server is shutting down.")
        completion_id = f"{wire.id_prefix}{uuid.uuid4().hex[:24]}"
        return self._complete(completion_id, chat, reply)

    async def _delay(self, seconds: float) -> bool:
        """Sleep ``seconds``; False if the server began stopping first."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stopping.wait(), seconds)
        return not self._stopping.is_set()

    def _complete(self, completion_id: str, chat: Chat, reply: Reply) -> Response:
        cached = min(self._cache.serve(chat), reply.usage.prompt_tokens)
        if chat.stream:
            parts = self._wire.stream(completion_id, chat.model, reply, cached,
                                      include_usage=chat.include_usage)
            return StreamingResponse(
                self._stream(completion_id, chat, reply, cached, parts),
                media_type="text/event-stream", headers={"Cache-Control": "no-cache"})
        self._served(completion_id, chat.model, reply.usage, cached)
        return json_response(200, self._wire.completion(completion_id, chat.model, reply,
                                                        cached))

    async def _stream(self, completion_id: str, chat: Chat, reply: Reply, cached: int,
                      parts: list[StreamPart]) -> AsyncIterator[bytes]:
        """A streamed reply's events, its pieces ``chunk_delay_ms`` apart. Its usage counts
        as reported (:meth:`_served`) once the stream has been written to its end."""
        pieces = 0
        for part in parts:
            if part.content:
                if pieces and self.chunk_delay_ms and \
                        not await self._delay(self.chunk_delay_ms / 1000):
                    return  # stopping: the stream ends unfinished
                self._piece(completion_id, chat, reply, pieces)
                pieces += 1
            yield part.data
        self._served(completion_id, chat.model, reply.usage, cached)

    def _piece(self, completion_id: str, chat: Chat, reply: Reply, index: int) -> None:
        """Called just before piece ``index`` (0: the first) of a streamed reply is written
        (a subclass may time it, or cut the stream there by raising)."""

    def _served(self, completion_id: str, model: str, usage: Usage, cached: int) -> None:
        """Called with the usage each completion reports (a subclass may log it)."""


class PromptCache:
    """Prefixes (at message boundaries, two messages at least) of the conversations served,
    keyed by model and tools too, as a provider's cache is."""

    def __init__(self) -> None:
        # Deterministic: nothing expires (a provider's entries do, after minutes).
        self._seen: BoundedCache[bytes, bool] = BoundedCache(max_entries=_CACHE_ENTRIES,
                                                             ttl_seconds=math.inf)

    def serve(self, chat: Chat) -> int:
        """Prompt tokens of the longest prefix of ``chat`` served before; remembers its
        prefixes for the requests after it."""
        digest = hashlib.sha256(orjson.dumps([chat.model, chat.tools],
                                             option=orjson.OPT_SORT_KEYS))
        prefixes: list[bytes] = []
        for message in chat.messages:
            digest.update(orjson.dumps(message, option=orjson.OPT_SORT_KEYS))
            prefixes.append(digest.digest())
        hit = next((length for length in range(len(prefixes), 1, -1)
                    if self._seen.get(prefixes[length - 1])), 0)
        for prefix in prefixes[1:]:
            self._seen.put(prefix, True)
        return prompt_tokens(chat.messages[:hit]) if hit else 0
