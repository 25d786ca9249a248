"""A fake OpenAI-compatible model server that answers from scripts, over real HTTP.

In a test::

    async with FakeModelServer(scripts={"default": script}) as model:
        ...  # point a model account at model.base_url ("http://127.0.0.1:PORT/v1")
        assert model.usage_log[0].total_tokens == ...

As a process (multi-process and chaos tests)::

    python -m tenantry.testing.fake_model --port 0 --scripts scripts.json
    # prints "READY http://127.0.0.1:PORT/v1" once listening; SIGTERM stops it

``scripts.json`` maps names to scripts in the :mod:`tenantry.models.scripted` format. Which
script answers is decided by :func:`tenantry.models.scripted.select_script`.

It speaks non-streaming ``POST /v1/chat/completions`` (plus ``GET /v1/models``), records
every request (headers and body) and every usage it reported, and has fault hooks:
``fail_next(n, status=500|429, retry_after=...)`` and ``set_mode("hang"|"malformed"|"ok")``.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import orjson
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import ASGIApp

from tenantry.models.scripted import (
    Reply,
    Script,
    ScriptError,
    UnknownModel,
    select_script,
)
from tenantry.testing._server import LoopbackService

__all__ = ["FakeModelServer", "Fault", "RecordedRequest", "UsageRecord", "load_scripts", "main"]

Mode = Literal["ok", "hang", "malformed"]

_ROLES = frozenset({"system", "developer", "user", "assistant", "tool"})
_MALFORMED_BODY = b'{"id": "chatcmpl-broken", "object": "chat.completion", "choices": ['


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


@dataclass(frozen=True, slots=True)
class UsageRecord:
    """Usage as the provider reported it for one completion: the billing ground truth."""

    completion_id: str
    model: str
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


@dataclass(frozen=True, slots=True)
class Fault:
    status: int
    retry_after: float | None


class FakeModelServer(LoopbackService):
    def __init__(
        self,
        scripts: Mapping[str, Script] | None = None,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        handle_signals: bool = False,
    ) -> None:
        self.scripts: dict[str, Script] = dict(scripts or {})
        self.requests: list[RecordedRequest] = []
        self.usage_log: list[UsageRecord] = []
        super().__init__(host=host, port=port, handle_signals=handle_signals)
        self._faults: list[Fault] = []
        self._mode: Mode = "ok"
        self._released = asyncio.Event()  # cleared while in "hang" mode
        self._released.set()
        self._closing = False
        self.app = Starlette(routes=[
            Route("/v1/chat/completions", self._chat_completions, methods=["POST"]),
            Route("/v1/models", self._models, methods=["GET"]),
        ])

    # ------------------------------------------------------------------ lifecycle

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:PORT/v1``: what an OpenAI client takes as ``base_url``."""
        return f"{self.origin}/v1"

    def _app(self) -> ASGIApp:
        return self.app

    async def start(self) -> None:
        self._closing = False
        await super().start()

    async def stop(self) -> None:
        self._closing = True
        self._released.set()  # hung requests answer 503 instead of holding up shutdown
        await super().stop()

    # ------------------------------------------------------------------ fault hooks

    def fail_next(self, n: int = 1, *, status: int = 500, retry_after: float | None = None) -> None:
        """Answer the next ``n`` chat completions with an OpenAI-style error ``status``
        (500 server_error, 429 rate limit, ...), with ``Retry-After`` if given."""
        if not 400 <= status <= 599:
            raise ValueError("status must be an HTTP error status")
        self._faults.extend(Fault(status, retry_after) for _ in range(n))

    def set_mode(self, mode: Mode) -> None:
        """``hang``: accept requests and never answer (until the mode changes or the server
        stops); ``malformed``: answer 200 with a truncated JSON body; ``ok``: normal."""
        if mode not in ("ok", "hang", "malformed"):
            raise ValueError(f"unknown mode {mode!r}")
        self._mode = mode
        if mode == "hang":
            self._released.clear()
        else:
            self._released.set()

    @property
    def mode(self) -> Mode:
        return self._mode

    def reset(self) -> None:
        """Forget recorded requests and usage, pending faults, and go back to ``ok``."""
        self.requests.clear()
        self.usage_log.clear()
        self._faults.clear()
        self.set_mode("ok")

    # ------------------------------------------------------------------ handlers

    async def _record(self, request: Request) -> bytes:
        body = await request.body()
        self.requests.append(RecordedRequest(
            request.method, request.url.path,
            {k.lower(): v for k, v in request.headers.items()}, body,
        ))
        return body

    async def _models(self, request: Request) -> Response:
        await self._record(request)
        names = ["scripted", "scripted/echo", *(f"scripted/{n}" for n in self.scripts)]
        return _json(200, {"object": "list", "data": [
            {"id": name, "object": "model", "created": 0, "owned_by": "tenantry-testing"}
            for name in dict.fromkeys(names)
        ]})

    async def _chat_completions(self, request: Request) -> Response:
        body = await self._record(request)
        if self._faults:
            return _fault_response(self._faults.pop(0))
        while not self._released.is_set():
            await self._released.wait()
        if self._closing:
            return _error(503, "The server is shutting down.", "server_error")
        if self._mode == "malformed":
            return Response(_MALFORMED_BODY, 200, media_type="application/json")

        try:
            payload = orjson.loads(body)
        except orjson.JSONDecodeError:
            return _error(400, "We could not parse the JSON body of your request.",
                          "invalid_request_error")
        problem = _validate(payload)
        if problem is not None:
            return _error(400, problem[0], "invalid_request_error", param=problem[1])
        model: str = payload["model"]
        messages: list[dict[str, Any]] = payload["messages"]
        try:
            reply = select_script(model, messages, self.scripts).reply(messages)
        except UnknownModel as exc:
            return _error(404, exc.detail, "invalid_request_error", param="model",
                          code="model_not_found")
        except ScriptError as exc:
            return _error(400, exc.detail, "invalid_request_error", param="messages")

        if reply.delay_ms:
            await asyncio.sleep(reply.delay_ms / 1000)
        completion_id = f"chatcmpl-{uuid.uuid4().hex[:24]}"
        usage = reply.usage
        self.usage_log.append(UsageRecord(completion_id, model, usage.prompt_tokens,
                                          usage.completion_tokens, usage.total_tokens))
        return _json(200, _completion_body(completion_id, model, reply))


# ---------------------------------------------------------------------- wire format


def _completion_body(completion_id: str, model: str, reply: Reply) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": reply.text, "refusal": None}
    if reply.tool_calls:
        message["tool_calls"] = [
            {"id": call.id, "type": "function",
             "function": {"name": call.name, "arguments": call.arguments}}
            for call in reply.tool_calls
        ]
    return {
        "id": completion_id,
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "message": message, "logprobs": None,
                     "finish_reason": reply.finish_reason}],
        "usage": {"prompt_tokens": reply.usage.prompt_tokens,
                  "completion_tokens": reply.usage.completion_tokens,
                  "total_tokens": reply.usage.total_tokens},
    }


def _validate(payload: Any) -> tuple[str, str | None] | None:
    """``(message, param)`` for the first problem in a chat-completions body, else None."""
    if not isinstance(payload, dict):
        return "The request body must be a JSON object.", None
    model = payload.get("model")
    if not isinstance(model, str) or not model:
        return "You must provide a model parameter.", "model"
    if payload.get("stream"):
        return "Streaming is not supported by the fake model server.", "stream"
    messages = payload.get("messages")
    if not isinstance(messages, list) or not messages:
        return "'messages' must be a non-empty array.", "messages"
    for i, message in enumerate(messages):
        problem = _message_problem(message)
        if problem is not None:
            return f"Invalid 'messages[{i}]': {problem}", f"messages[{i}]"
    tools = payload.get("tools")
    if tools is not None:
        if not isinstance(tools, list):
            return "'tools' must be an array.", "tools"
        for i, tool in enumerate(tools):
            function = tool.get("function") if isinstance(tool, dict) else None
            if (not isinstance(tool, dict) or tool.get("type") != "function"
                    or not isinstance(function, dict)
                    or not isinstance(function.get("name"), str)):
                return (f"Invalid 'tools[{i}]': expected {{\"type\": \"function\", "
                        f"\"function\": {{\"name\", ...}}}}."), f"tools[{i}]"
    tool_choice = payload.get("tool_choice")
    if tool_choice is not None and not (
        tool_choice in ("none", "auto", "required") or isinstance(tool_choice, dict)
    ):
        return "Invalid 'tool_choice'.", "tool_choice"
    return None


def _message_problem(message: Any) -> str | None:
    if not isinstance(message, dict):
        return "expected an object."
    role = message.get("role")
    if role not in _ROLES:
        return f"unknown role {role!r}."
    content = message.get("content")
    if content is not None and not isinstance(content, str | list):
        return "'content' must be a string, an array of parts, or null."
    if role == "tool" and not isinstance(message.get("tool_call_id"), str):
        return "a tool message needs 'tool_call_id'."
    calls = message.get("tool_calls")
    if calls is not None:
        if role != "assistant" or not isinstance(calls, list):
            return "'tool_calls' is an array on assistant messages only."
        for call in calls:
            function = call.get("function") if isinstance(call, dict) else None
            if (not isinstance(function, dict) or not isinstance(call.get("id"), str)
                    or not isinstance(function.get("name"), str)
                    or not isinstance(function.get("arguments"), str)):
                return "a tool call is {id, type, function: {name, arguments: string}}."
    elif role != "assistant" and content is None:
        return "'content' is required."
    return None


def _json(status: int, body: Any, headers: Mapping[str, str] | None = None) -> Response:
    return Response(orjson.dumps(body), status, headers=dict(headers or {}),
                    media_type="application/json")


def _error(
    status: int,
    message: str,
    type_: str,
    *,
    param: str | None = None,
    code: str | None = None,
    headers: Mapping[str, str] | None = None,
) -> Response:
    return _json(status, {"error": {"message": message, "type": type_, "param": param,
                                    "code": code}}, headers)


def _fault_response(fault: Fault) -> Response:
    headers: dict[str, str] = {}
    if fault.retry_after is not None:
        value = fault.retry_after
        headers["retry-after"] = str(int(value)) if value == int(value) else str(value)
        headers["retry-after-ms"] = str(int(value * 1000))
    if fault.status == 429:
        return _error(429, "Rate limit reached for requests. Please try again later.",
                      "requests", code="rate_limit_exceeded", headers=headers)
    if fault.status >= 500:
        return _error(fault.status, "The server had an error while processing your request.",
                      "server_error", headers=headers)
    return _error(fault.status, "Injected error.", "invalid_request_error", headers=headers)


# ---------------------------------------------------------------------- process mode


def load_scripts(path: str | Path) -> dict[str, Script]:
    """A scripts file: a JSON object mapping script names to scripts."""
    data = orjson.loads(Path(path).read_bytes())
    if not isinstance(data, dict):
        raise ScriptError("a scripts file is a JSON object of name -> script")
    return {str(name): Script.from_data(value) for name, value in data.items()}


async def _serve(host: str, port: int, scripts: dict[str, Script]) -> None:
    server = FakeModelServer(scripts, host=host, port=port, handle_signals=True)
    await server.start()
    print(f"READY {server.base_url}", flush=True)
    await server.wait()


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m tenantry.testing.fake_model",
                                     description="Fake OpenAI-compatible model server.")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    parser.add_argument("--scripts", help="JSON file mapping script names to scripts")
    args = parser.parse_args(argv)
    try:
        scripts = load_scripts(args.scripts) if args.scripts else {}
    except (OSError, orjson.JSONDecodeError, ScriptError) as exc:
        print(f"cannot read scripts: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    asyncio.run(_serve(args.host, args.port, scripts))


if __name__ == "__main__":
    main()
