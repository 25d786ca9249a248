"""A fake model server that answers from scripts over real HTTP, in OpenAI's chat
completions or Anthropic's Messages wire format: the platform's built-in scripted model
(:class:`tenantry.models.scripted_server.ScriptedModelServer`) plus what tests need.

In a test::

    async with FakeModelServer(scripts={"default": script}) as model:
        ...  # point a model account at model.base_url ("http://127.0.0.1:PORT/v1")
        assert model.usage_log[0].total_tokens == ...

    async with FakeModelServer(provider="anthropic") as model:
        ...  # model.base_url is the origin "http://127.0.0.1:PORT", as Anthropic's SDK takes it

As a process (multi-process and chaos tests)::

    python -m tenantry.testing.fake_model --port 0 --scripts scripts.json \\
        [--provider anthropic] [--rpm 600 [--rpm-window 10] [--no-rate-limit-headers]]
        [--no-models-endpoint] [--chunk-delay-ms 20]
    # prints "READY <base_url>" once listening; SIGTERM stops it

``scripts.json`` maps names to scripts in the :mod:`tenantry.models.scripted` format. Which
script answers is decided by :func:`tenantry.models.scripted.select_script`. An Anthropic
conversation is read back into the OpenAI shape first
(:func:`tenantry.models.anthropic.openai_messages`), so one script answers both formats with
the same text, tool call ids (``call_<step>_<n>``) and token counts. (Anthropic's format
has no malformed tool calls: scripted arguments that are not a JSON object arrive as ``{}``.)

It speaks ``POST /v1/chat/completions`` (openai) or ``POST /v1/messages`` (anthropic),
whole or streamed as the request asks (``stream: true``: OpenAI's chunks, with the usage
chunk when ``stream_options.include_usage`` is set, and ``data: [DONE]``; Anthropic's
``message_start`` … ``message_stop`` events; the text a word at a time and tool calls'
arguments in pieces, ``chunk_delay_ms`` apart), plus ``GET /v1/models`` — unless
``models_endpoint=False``: then that path answers 404 in the provider's error body, down
or not, as a provider without the endpoint does — and records every request (headers and
body) and every usage it reported (:class:`UsageRecord`, with the time it was served; a
streamed reply's once its stream was written to the end).

Billing exports: the provider's own usage report and cost report (OpenAI's organization
Usage and Costs APIs, Anthropic's Admin API usage and cost reports), per UTC day, computed
from ``usage_log`` and guarded by ``admin_key`` (see :mod:`tenantry.testing._usage_reports`).
Costs need ``prices``. A test makes the provider disagree with the platform by appending a
record the platform never saw to ``usage_log``, or by replacing one.

Prompt cache (deterministic, :class:`~tenantry.models.scripted_server.PromptCache`): the
server remembers every prefix of at least two messages of the conversations it answered (per
model and tool list). A request whose longest such prefix was seen before reports that
prefix's :func:`~tenantry.models.scripted.prompt_tokens` as cached: OpenAI's
``usage.prompt_tokens_details.cached_tokens`` (``prompt_tokens`` still counts all),
Anthropic's ``cache_read_input_tokens`` (``input_tokens`` is then the rest;
``cache_creation_input_tokens`` is always 0 and ``cache_control`` breakpoints are not
needed; a step's ``usage`` override caps it). The cache belongs to the server, as a
provider's belongs to an account: a run that moves to another account loses it.

Fault hooks: ``fail_next(n, status=..., retry_after=...)`` answers with the provider's error
body; ``cut_next(n, after_pieces=k)`` closes the connection of the next ``n`` streamed
replies after ``k`` of their pieces (no end marker, no usage: a stream cut mid-way);
``set_mode``: ``hang`` (never answer), ``malformed`` (200, truncated JSON),
``no_choices`` (200, valid JSON without ``choices``/``content``), ``down`` (503 to every
request, ``GET /v1/models`` included if the server has it), ``ok``. ``rpm=N`` enforces N
chat requests per sliding minute (429 with ``retry-after`` beyond) and puts the provider's
request rate-limit headers on every chat reply; with ``rpm_window_seconds=W`` it is
enforced over a sliding W seconds instead (``N * W / 60`` requests per W), as providers
that quantize their limits do. ``rate_limited`` counts the 429s that limit answered,
``admitted_at`` holds when each request it let through came, and ``busiest_window()`` is
the most it let through in any window — what a test of the workers' shared limit reads.
``rate_limit_headers=False`` leaves the headers off (many OpenAI-compatible servers send
none): then only its 429s tell callers they went too fast. ``pieces_written`` counts the
pieces of streamed replies written so far (a test can wait until a reply is half out).

Model snapshots: replies name the model the request asked for, unless ``reported_model`` is
set — then every reply (whole or streamed, either format) says that snapshot served it, as a
provider does after changing what stands behind a name (``gpt-4o`` →
``gpt-4o-2024-08-06``). ``requested_models`` lists the ``model`` each chat request asked
for, in order (``requests[i].json()`` has the whole body).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import math
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, get_args

import orjson
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute

from tenantry.ledger.tokens import TokenUsage
from tenantry.models.openai_wire import OpenAIWire
from tenantry.models.scripted import Reply, Script, ScriptError, Usage
from tenantry.models.scripted_server import PromptCache, ScriptedModelServer
from tenantry.models.wire import Chat, Wire, json_response
from tenantry.testing._anthropic_wire import AnthropicWire
from tenantry.testing._faults import (
    DOWN,
    Fault,
    RequestWindow,
    StreamCut,
    fault_response,
    quiet_cuts,
)
from tenantry.testing._usage_reports import Prices, UsageReports

__all__ = ["FakeModelServer", "Fault", "RecordedRequest", "UsageRecord", "load_scripts", "main"]

Provider = Literal["openai", "anthropic"]
Mode = Literal["ok", "hang", "malformed", "no_choices", "down"]

# Each provider's request checks and reply, error and header shapes.
_WIRES: dict[str, Wire] = {"openai": OpenAIWire(), "anthropic": AnthropicWire()}


@dataclass(frozen=True, slots=True)
class RecordedRequest:
    """One HTTP request as the server received it (header names lower-cased)."""

    method: str
    path: str
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        """The body parsed as JSON (``None`` if it is not JSON)."""
        try:
            return orjson.loads(self.body)
        except orjson.JSONDecodeError:
            return None

    @property
    def api_key(self) -> str | None:
        """The credential sent: ``x-api-key``, else the ``Authorization: Bearer`` token
        (OpenAI's SDK, and Anthropic's since 2.x, send the latter)."""
        key = self.headers.get("x-api-key")
        if key:
            return key
        scheme, _, token = self.headers.get("authorization", "").partition(" ")
        return (token.strip() or None) if scheme.lower() == "bearer" else None


@dataclass(frozen=True, slots=True)
class UsageRecord:
    """Usage as the provider reported it for one completion: the billing ground truth.

    ``prompt_tokens`` counts every prompt token; ``cached_tokens`` of them were read from the
    prompt cache. Price a record as ``(prompt_tokens - cached_tokens) * input price +
    cached_tokens * cached-input price + completion_tokens * output price``, which is what
    :meth:`~tenantry.ledger.pricing.PriceTable.cost_micros` computes from
    :attr:`token_usage`. (On Anthropic's wire ``input_tokens`` is ``prompt_tokens -
    cached_tokens`` and ``cache_read_input_tokens`` is ``cached_tokens``.)"""

    completion_id: str
    model: str
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    cached_tokens: int = 0
    provider: Provider = "openai"
    created_at: float = field(default_factory=time.time)  # Unix seconds: its report day

    @property
    def token_usage(self) -> TokenUsage:
        """The :class:`TokenUsage` a client should have read from this reply."""
        return TokenUsage(input_tokens=self.prompt_tokens,
                          output_tokens=self.completion_tokens,
                          cached_input_tokens=self.cached_tokens)


class FakeModelServer(ScriptedModelServer):
    def __init__(
        self,
        scripts: Mapping[str, Script] | None = None,
        *,
        provider: Provider = "openai",
        rpm: int | None = None,
        rpm_window_seconds: float = 60.0,
        rate_limit_headers: bool = True,
        models_endpoint: bool = True,
        host: str = "127.0.0.1",
        port: int = 0,
        handle_signals: bool = False,
        admin_key: str = "sk-admin-fake",
        prices: Prices | None = None,
        chunk_delay_ms: float = 0.0,
    ) -> None:
        if provider not in _WIRES:
            raise ValueError(f"unknown provider {provider!r}")
        if rpm is not None and rpm < 1:
            raise ValueError("rpm must be at least 1")
        if not 0 < rpm_window_seconds <= 60:
            raise ValueError("rpm_window_seconds must be in (0, 60]")
        wire = _WIRES[provider]
        self.provider: Provider = provider
        self.rpm = rpm
        self.rpm_window_seconds = rpm_window_seconds
        self.rate_limit_headers = rate_limit_headers
        self.rate_limited = 0  # 429s answered because the rpm was reached
        self.pieces_written = 0  # pieces (text, tool calls) of streamed replies, ever
        self.models_endpoint = models_endpoint
        # The model id replies report (None: the name each request asked for).
        self.reported_model: str | None = None
        self.requests: list[RecordedRequest] = []
        self.usage_log: list[UsageRecord] = []
        self._faults: list[Fault] = []
        self._cuts: list[int] = []  # pieces before the cut, for the next streamed replies
        self._cutting: dict[str, int] = {}  # completion id -> pieces before its cut
        self._mode: Mode = "ok"
        self._released = asyncio.Event()  # cleared while in "hang" mode
        self._released.set()
        self._closing = False
        self._window = self._new_window()
        # Before the base builds the app: its routes include the reports'.
        self.reports = UsageReports(provider=provider, wire=wire,
                                    log=lambda: self.usage_log, record=self._record,
                                    admin_key=admin_key,
                                    prices=prices)
        super().__init__(scripts, wire=wire, host=host, port=port,
                         handle_signals=handle_signals, chunk_delay_ms=chunk_delay_ms)
        quiet_cuts()

    def _routes(self) -> list[BaseRoute]:
        return [*super()._routes(), *self.reports.routes()]

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        self._closing = False
        await super().start()

    async def stop(self) -> None:
        self._closing = True
        self._released.set()  # hung requests answer 503 instead of holding up shutdown
        await super().stop()

    # ------------------------------------------------------------------ fault hooks

    def fail_next(self, n: int = 1, *, status: int = 500, retry_after: float | None = None) -> None:
        """Answer the next ``n`` chat requests with error ``status`` in the provider's error
        shape (openai: 500 ``server_error``, 429 ``rate_limit_exceeded``; anthropic: 500
        ``api_error``, 429 ``rate_limit_error``, 529 ``overloaded_error``, ...), with
        ``retry-after`` if given."""
        if not 400 <= status <= 599:
            raise ValueError("status must be an HTTP error status")
        self._faults.extend(Fault(status, retry_after) for _ in range(n))

    def cut_next(self, n: int = 1, *, after_pieces: int = 2) -> None:
        """Close the connection of the next ``n`` streamed replies after ``after_pieces``
        of their pieces were written: the client gets no end marker and no usage (the
        reply is not counted in ``usage_log``). Whole (non-streamed) replies are not cut."""
        if after_pieces < 0:
            raise ValueError("after_pieces must be >= 0")
        self._cuts.extend(after_pieces for _ in range(n))

    def set_mode(self, mode: Mode) -> None:
        """``hang``: accept requests and never answer (until the mode changes or the server
        stops); ``malformed``: answer 200 with a truncated JSON body; ``no_choices``: answer
        200 with valid JSON that has no ``choices`` (openai) or ``content`` (anthropic);
        ``down``: answer every request 503; ``ok``: normal."""
        if mode not in get_args(Mode):
            raise ValueError(f"unknown mode {mode!r}")
        self._mode = mode
        if mode == "hang":
            self._released.clear()
        else:
            self._released.set()

    @property
    def mode(self) -> Mode:
        return self._mode

    @property
    def admitted_at(self) -> list[float]:
        """When each chat request the rpm limit let through came (monotonic seconds)."""
        return list(self._window.history) if self._window is not None else []

    def busiest_window(self) -> int:
        """The most chat requests let through in any sliding window of the limit's length
        (``rpm_window_seconds``): at most the window's limit, by construction; what matters
        is how close the callers came, and ``rate_limited`` how often they went past."""
        times, most, first = self.admitted_at, 0, 0
        for last, at in enumerate(times):
            while at - times[first] >= self.rpm_window_seconds:
                first += 1
            most = max(most, last - first + 1)
        return most

    def _new_window(self) -> RequestWindow | None:
        if self.rpm is None:
            return None
        return RequestWindow(self.rpm, self.rpm_window_seconds)

    def reset(self) -> None:
        """Forget recorded requests and usage, pending faults, the prompt cache, the
        rate-limit window and the reported model, and go back to ``ok``."""
        self.reported_model = None
        self.requests.clear()
        self.usage_log.clear()
        self.pieces_written = 0
        self._faults.clear()
        self._cuts.clear()
        self._cache = PromptCache()
        self._window = self._new_window()
        self.rate_limited = 0
        self.set_mode("ok")

    # ------------------------------------------------------------------ handlers

    async def _record(self, request: Request) -> bytes:
        body = await request.body()
        self.requests.append(RecordedRequest(
            request.method, request.url.path,
            {k.lower(): v for k, v in request.headers.items()}, body,
        ))
        return body

    async def _body(self, request: Request) -> bytes:
        return await self._record(request)

    def _model_list(self) -> Response:
        if not self.models_endpoint:  # optional: many OpenAI-compatible servers lack it
            return self._wire.error(404, "Unknown path: GET /v1/models.")
        if self._mode == "down":
            return self._wire.error(503, DOWN)
        return super()._model_list()

    async def _chat(self, request: Request) -> Response:
        response = await super()._chat(request)
        if self._window is not None and self.rate_limit_headers:
            remaining, reset = self._window.state(time.monotonic())
            response.headers.update(self._wire.limit_headers(self._window.limit, remaining,
                                                             reset))
        return response

    async def _answer(self, body: bytes) -> Response:
        wire = self._wire
        if self._mode != "down":  # down: faults stay queued for when it is back
            if self._faults:
                return fault_response(wire, self._faults.pop(0))
            if self._window is not None:
                wait = self._window.admit(time.monotonic())
                if wait is not None:
                    self.rate_limited += 1
                    return wire.error(429, f"Rate limit of {self._window.limit} requests "
                                      "per minute reached. Please try again later.",
                                      headers={"retry-after": str(math.ceil(wait))})
            while not self._released.is_set():
                await self._released.wait()
        if self._closing:
            return wire.error(503, "The server is shutting down.")
        if self._mode == "down":
            return wire.error(503, DOWN)
        if self._mode == "malformed":
            return Response(wire.malformed, 200, media_type="application/json")
        return await super()._answer(body)

    @property
    def requested_models(self) -> list[str]:
        """The ``model`` each chat request asked for, in order (as sent on the wire)."""
        models = []
        for request in self.requests:
            body = request.json() if request.method == "POST" else None
            if isinstance(body, dict) and "messages" in body:
                models.append(str(body.get("model")))
        return models

    def _complete(self, completion_id: str, chat: Chat, reply: Reply) -> Response:
        if self.reported_model is not None:  # the reply names the snapshot that served it
            chat = dataclasses.replace(chat, model=self.reported_model)
        if self._mode == "no_choices":
            return json_response(200, self._wire.without_content(completion_id, chat.model))
        if chat.stream and self._cuts:
            self._cutting[completion_id] = self._cuts.pop(0)
        return super()._complete(completion_id, chat, reply)

    def _piece(self, completion_id: str, chat: Chat, reply: Reply, index: int) -> None:
        cut = self._cutting.get(completion_id)
        if cut is not None and index >= cut:
            del self._cutting[completion_id]
            raise StreamCut(f"stream {completion_id} cut after {index} pieces")
        self.pieces_written += 1

    def _served(self, completion_id: str, model: str, usage: Usage, cached: int) -> None:
        self._cutting.pop(completion_id, None)  # a cut asked for after its last piece
        self.usage_log.append(UsageRecord(completion_id, model, usage.prompt_tokens,
                                          usage.completion_tokens, usage.total_tokens,
                                          cached, self.provider))


# ---------------------------------------------------------------------- process mode


def load_scripts(path: str | Path) -> dict[str, Script]:
    """A scripts file: a JSON object mapping script names to scripts."""
    data = orjson.loads(Path(path).read_bytes())
    if not isinstance(data, dict):
        raise ScriptError("a scripts file is a JSON object of name -> script")
    return {str(name): Script.from_data(value) for name, value in data.items()}


async def _serve(host: str, port: int, scripts: dict[str, Script], provider: Provider,
                 rpm: int | None, models_endpoint: bool, rpm_window: float = 60.0,
                 rate_limit_headers: bool = True, chunk_delay_ms: float = 0.0) -> None:
    server = FakeModelServer(scripts, provider=provider, rpm=rpm, rpm_window_seconds=rpm_window,
                             rate_limit_headers=rate_limit_headers,
                             models_endpoint=models_endpoint, host=host, port=port,
                             handle_signals=True, chunk_delay_ms=chunk_delay_ms)
    await server.start()
    print(f"READY {server.base_url}", flush=True)
    await server.wait()


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m tenantry.testing.fake_model",
                                     description="Fake model server (OpenAI or Anthropic "
                                                 "wire format) answering from scripts.")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    parser.add_argument("--scripts", help="JSON file mapping script names to scripts")
    parser.add_argument("--provider", choices=get_args(Provider), default="openai",
                        help="wire format to speak")
    parser.add_argument("--rpm", type=int, default=None,
                        help="requests per minute to allow (default: unlimited)")
    parser.add_argument("--rpm-window", type=float, default=60.0,
                        help="seconds over which --rpm is enforced, scaled (default 60)")
    parser.add_argument("--no-rate-limit-headers", dest="rate_limit_headers",
                        action="store_false", help="send no rate-limit headers with --rpm")
    parser.add_argument("--no-models-endpoint", dest="models_endpoint", action="store_false",
                        help="answer GET /v1/models 404, like a provider without it")
    parser.add_argument("--chunk-delay-ms", type=float, default=0.0,
                        help="milliseconds between two pieces of a streamed reply (default 0)")
    args = parser.parse_args(argv)
    if args.rpm is not None and args.rpm < 1:
        parser.error("--rpm must be at least 1")
    if not 0 < args.rpm_window <= 60:
        parser.error("--rpm-window must be in (0, 60]")
    if args.chunk_delay_ms < 0:
        parser.error("--chunk-delay-ms must be >= 0")
    try:
        scripts = load_scripts(args.scripts) if args.scripts else {}
    except (OSError, orjson.JSONDecodeError, ScriptError) as exc:
        print(f"cannot read scripts: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    asyncio.run(_serve(args.host, args.port, scripts, args.provider, args.rpm,
                       args.models_endpoint, args.rpm_window, args.rate_limit_headers,
                       args.chunk_delay_ms))


if __name__ == "__main__":
    main()
