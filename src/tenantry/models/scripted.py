"""The scripted model: replies decided by a script instead of a neural network.

Pure logic, no I/O. A :class:`Script` is a list of steps; the reply to a conversation is the
step whose index is *the number of assistant messages already in the conversation* (plus
the steps a platform summary in it stands for, :mod:`tenantry.models.summaries`). The reply
is therefore a pure function of the messages: a retried call, or a run resumed on another
worker from its event log, gets the identical reply (tool call ids included). The engine's
crash-recovery tests depend on that. A summary request (the platform's summarizing call)
is answered with a short summary: how many steps, and the last tool result's start.

Conversations use the OpenAI chat-completions message shape (``{"role", "content",
"tool_calls"?, "tool_call_id"?}``), which is what the fake model server receives.

Script JSON (``Script.to_json`` / ``Script.from_json``; a bare list of steps is accepted)::

    {"steps": [
      {"tool_calls": [{"name": "effect", "arguments": {"note": "{input}"}}], "delay_ms": 20},
      {"text": "Done: {last_tool_result}", "usage": {"prompt_tokens": 100}}
    ]}

Placeholders in answer text and in string tool arguments (at any depth): ``{input}`` (the
first user message's text), ``{last_tool_result}`` (content of the last tool message) and
``{tool_results}`` (every tool message's content, joined by newlines; the platform's
``<tool_output>`` fence around a result is taken off) and ``{system}`` (the system message:
the agent's prompt, so a prompt's change changes the reply, as with a real model). Other
braces are left
alone. Usage is ``ceil(chars / 4)`` for prompt and completion; see :func:`prompt_tokens` and
:func:`completion_tokens`, which billing tests can call to recompute it.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import orjson

from tenantry.errors import NotFound, ValidationFailed
from tenantry.models.summaries import is_summary_request, summarized_steps

__all__ = [
    "ECHO",
    "SCRIPTED_MODEL",
    "Reply",
    "ReplyToolCall",
    "Script",
    "ScriptError",
    "Step",
    "ToolCall",
    "UnknownModel",
    "Usage",
    "UsageOverride",
    "completion_tokens",
    "conversation_input",
    "inline_script",
    "message_text",
    "prompt_tokens",
    "select_script",
    "tokens_for_chars",
]

SCRIPTED_MODEL = "scripted"
"""Model name that selects a server's default script; ``scripted/<name>`` selects a named one."""

FALLBACK_TEXT = "done"
#: How much of the last tool result a scripted summary quotes (summaries stay short).
SUMMARY_QUOTE_CHARS = 60

_PLACEHOLDER = re.compile(r"\{(input|last_tool_result|tool_results|system)\}")
_STEP_KEYS = frozenset({"text", "tool_calls", "delay_ms", "usage"})
_USAGE_KEYS = frozenset({"prompt_tokens", "completion_tokens"})


class ScriptError(ValidationFailed):
    """A script (from a file, a process argument or an inline message) that cannot be read."""

    type = "invalid_script"
    title = "Invalid script"


class UnknownModel(NotFound):
    """The request names a model (script) the server does not have."""

    type = "model_not_found"
    title = "Model not found"


# --------------------------------------------------------------------------- values


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One tool call a step makes; string arguments may contain placeholders.

    ``arguments`` given as a string are sent verbatim (no placeholders), and ``name`` may
    be empty: that is how tests make a model write a malformed call."""

    name: str
    arguments: Mapping[str, Any] | str = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class UsageOverride:
    """Fixed token counts for one step (``None`` keeps the computed count)."""

    prompt_tokens: int | None = None
    completion_tokens: int | None = None


@dataclass(frozen=True, slots=True)
class Step:
    """A final answer (``text``), or a non-empty list of tool calls — with, optionally, the
    ``text`` the model says before them (as real models do: an approver reads it)."""

    text: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()
    delay_ms: int = 0
    usage: UsageOverride | None = None

    def __post_init__(self) -> None:
        if self.text is None and not self.tool_calls:
            raise ScriptError("a step has 'text', a non-empty 'tool_calls', or both")
        if self.delay_ms < 0:
            raise ScriptError("delay_ms must be >= 0")

    @classmethod
    def answer(
        cls, text: str, *, delay_ms: int = 0, usage: UsageOverride | None = None
    ) -> Step:
        return cls(text=text, delay_ms=delay_ms, usage=usage)

    @classmethod
    def calls(
        cls, *calls: ToolCall, delay_ms: int = 0, usage: UsageOverride | None = None
    ) -> Step:
        return cls(tool_calls=tuple(calls), delay_ms=delay_ms, usage=usage)

    @classmethod
    def call(cls, name: str, /, **arguments: Any) -> Step:
        """Shorthand for a step with one tool call: ``Step.call("add", a=1, b=2)``."""
        return cls(tool_calls=(ToolCall(name, arguments),))


@dataclass(frozen=True, slots=True)
class Usage:
    prompt_tokens: int
    completion_tokens: int

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


@dataclass(frozen=True, slots=True)
class ReplyToolCall:
    """A tool call as the model sends it: a deterministic id and JSON-encoded arguments."""

    id: str
    name: str
    arguments: str


@dataclass(frozen=True, slots=True)
class Reply:
    step_index: int
    text: str | None
    tool_calls: tuple[ReplyToolCall, ...]
    usage: Usage
    delay_ms: int

    @property
    def finish_reason(self) -> Literal["stop", "tool_calls"]:
        return "tool_calls" if self.tool_calls else "stop"

    def assistant_message(self) -> dict[str, Any]:
        """The reply as an OpenAI assistant message (to append to the conversation)."""
        message: dict[str, Any] = {"role": "assistant", "content": self.text}
        if self.tool_calls:
            message["tool_calls"] = [
                {"id": c.id, "type": "function",
                 "function": {"name": c.name, "arguments": c.arguments}}
                for c in self.tool_calls
            ]
        return message


@dataclass(frozen=True, slots=True)
class Script:
    steps: tuple[Step, ...] = ()

    def __init__(self, steps: Sequence[Step] = ()) -> None:
        object.__setattr__(self, "steps", tuple(steps))

    @classmethod
    def of(cls, *steps: Step) -> Script:
        return cls(steps)

    def reply(self, messages: Sequence[Mapping[str, Any]]) -> Reply:
        """The reply to ``messages``: a pure function of them (see the module docstring)."""
        index = sum(1 if m.get("role") == "assistant" else summarized_steps(m)
                    for m in messages)
        values = _Placeholders.of(messages)
        if is_summary_request(messages):
            summary = f"Steps 1-{index} done; the last tool result began: " + (
                values.last_tool_result[:SUMMARY_QUOTE_CHARS])
            usage = Usage(prompt_tokens(messages), _completion_tokens(summary, ()))
            return Reply(index, summary, (), usage, 0)
        if index < len(self.steps):
            step = self.steps[index]
        else:  # out of steps: repeat the last answer, or say "done"
            last = self.steps[-1] if self.steps else None
            step = Step(text=last.text if last is not None and last.text is not None
                        and not last.tool_calls else FALLBACK_TEXT)
        text = values.fill(step.text) if step.text is not None else None
        calls = tuple(
            ReplyToolCall(
                id=f"call_{index}_{i}",
                name=call.name,
                arguments=(call.arguments if isinstance(call.arguments, str) else
                           orjson.dumps(values.fill_json(dict(call.arguments))).decode()),
            )
            for i, call in enumerate(step.tool_calls)
        )
        usage = Usage(prompt_tokens(messages), _completion_tokens(text, calls))
        if step.usage is not None:
            usage = Usage(
                usage.prompt_tokens if step.usage.prompt_tokens is None
                else step.usage.prompt_tokens,
                usage.completion_tokens if step.usage.completion_tokens is None
                else step.usage.completion_tokens,
            )
        return Reply(index, text, calls, usage, step.delay_ms)

    # ---------------------------------------------------------------- serialisation

    def to_data(self) -> dict[str, Any]:
        """Plain JSON-able form (what ``to_json`` encodes)."""
        return {"steps": [_step_to_data(s) for s in self.steps]}

    def to_json(self) -> str:
        return orjson.dumps(self.to_data()).decode()

    @classmethod
    def from_data(cls, data: Any) -> Script:
        """Read the plain form: ``{"steps": [...]}`` or a bare list of steps."""
        if isinstance(data, Mapping):
            extra = set(data) - {"steps"}
            if extra:
                raise ScriptError(f"unknown script keys: {sorted(extra)}")
            data = data.get("steps")
        if not isinstance(data, list):
            raise ScriptError("a script is a list of steps or {\"steps\": [...]}")
        return cls([_step_from_data(item, i) for i, item in enumerate(data)])

    @classmethod
    def from_json(cls, text: str | bytes) -> Script:
        try:
            data = orjson.loads(text)
        except orjson.JSONDecodeError as exc:
            raise ScriptError(f"script is not JSON: {exc}") from None
        return cls.from_data(data)


ECHO = Script.of(Step.answer("You said: {input}"))
"""Built-in demo script (``scripted/echo``, and the default when a server has none)."""


# --------------------------------------------------------------------------- usage


def tokens_for_chars(chars: int) -> int:
    return math.ceil(chars / 4)


def message_text(message: Mapping[str, Any]) -> str:
    """The text of a message: a string, or the text parts of a content list joined."""
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            part["text"] for part in content
            if isinstance(part, Mapping) and isinstance(part.get("text"), str)
        )
    return ""


def prompt_tokens(messages: Sequence[Mapping[str, Any]]) -> int:
    """``ceil(chars / 4)`` where chars counts every message's text plus, for each tool call
    an assistant message carries, its function name and its arguments string."""
    chars = 0
    for message in messages:
        chars += len(message_text(message))
        for call in message.get("tool_calls") or ():
            function = call.get("function") if isinstance(call, Mapping) else None
            if isinstance(function, Mapping):
                chars += len(str(function.get("name") or ""))
                arguments = function.get("arguments") or ""
                chars += len(arguments if isinstance(arguments, str)
                             else orjson.dumps(arguments).decode())
    return tokens_for_chars(chars)


def completion_tokens(reply: Reply) -> int:
    """What the reply would cost without an override: ``ceil(chars / 4)`` of its text, or of
    each tool call's name plus JSON arguments."""
    return _completion_tokens(reply.text, reply.tool_calls)


def _completion_tokens(text: str | None, calls: Sequence[ReplyToolCall]) -> int:
    chars = len(text or "") + sum(len(c.name) + len(c.arguments) for c in calls)
    return tokens_for_chars(chars)


# --------------------------------------------------------------------------- selection


def select_script(
    model: str, messages: Sequence[Mapping[str, Any]], scripts: Mapping[str, Script]
) -> Script:
    """Which script answers a request.

    An inline script in the first user message wins (tests give each run its own
    behaviour that way). Otherwise ``scripted`` → ``scripts["default"]`` (else the echo
    script), ``scripted/<name>`` → ``scripts[name]`` (``echo`` is built in), and any other
    model name that is a key of ``scripts`` → that script, so a fake server can stand in for
    a named model. Anything else raises :class:`UnknownModel`.
    """
    inline = inline_script(messages)
    if inline is not None:
        return inline
    if model == SCRIPTED_MODEL:
        return scripts.get("default", ECHO)
    if model.startswith(SCRIPTED_MODEL + "/"):
        name = model[len(SCRIPTED_MODEL) + 1:]
        if name in scripts:
            return scripts[name]
        if name == "echo":
            return ECHO
    elif model in scripts:
        return scripts[model]
    raise UnknownModel(f"The model `{model}` does not exist or you do not have access to it.")


def inline_script(messages: Sequence[Mapping[str, Any]]) -> Script | None:
    """The script carried by the first user message, if that message is a JSON object with
    a ``"script"`` key (``{"script": [...steps], "input": "optional text for {input}"}``)."""
    envelope = _inline_envelope(messages)
    return None if envelope is None else Script.from_data(envelope["script"])


def conversation_input(messages: Sequence[Mapping[str, Any]]) -> str:
    """What ``{input}`` means: the first user message's text, or the ``"input"`` field of an
    inline-script envelope."""
    envelope = _inline_envelope(messages)
    if envelope is not None:
        value = envelope.get("input")
        return value if isinstance(value, str) else ""
    first = _first_user(messages)
    return "" if first is None else message_text(first)


def _first_user(messages: Sequence[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    return next((m for m in messages if m.get("role") == "user"), None)


def _inline_envelope(messages: Sequence[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    first = _first_user(messages)
    if first is None:
        return None
    text = message_text(first).strip()
    if not text.startswith("{"):
        return None
    try:
        data = orjson.loads(text)
    except orjson.JSONDecodeError:
        return None  # ordinary text that happens to start with a brace
    if isinstance(data, dict) and "script" in data:
        return data
    return None


# --------------------------------------------------------------------------- internals

_FENCE = re.compile(r"\A<tool_output [^>]*>\n(.*)\n</tool_output>\Z", re.DOTALL)


def _unfenced(text: str) -> str:
    """The data inside the platform's ``<tool_output>`` fence (placeholders hold the tool's
    own output, as a model reading the fence would understand it)."""
    match = _FENCE.match(text)
    return match.group(1) if match else text


@dataclass(frozen=True, slots=True)
class _Placeholders:
    input: str
    last_tool_result: str
    tool_results: str
    system: str = ""

    @classmethod
    def of(cls, messages: Sequence[Mapping[str, Any]]) -> _Placeholders:
        results = [_unfenced(message_text(m)) for m in messages if m.get("role") == "tool"]
        system = next((message_text(m) for m in messages if m.get("role") == "system"), "")
        return cls(conversation_input(messages), results[-1] if results else "",
                   "\n".join(results), system)

    def fill(self, template: str) -> str:
        # One pass, so a tool result that itself contains "{input}" is not expanded again.
        return _PLACEHOLDER.sub(lambda m: str(getattr(self, m.group(1))), template)

    def fill_json(self, value: Any) -> Any:
        if isinstance(value, str):
            return self.fill(value)
        if isinstance(value, Mapping):
            return {k: self.fill_json(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [self.fill_json(v) for v in value]
        return value


def _step_to_data(step: Step) -> dict[str, Any]:
    data: dict[str, Any] = {}
    if step.text is not None:
        data["text"] = step.text
    if step.tool_calls:
        data["tool_calls"] = [
            {"name": c.name,
             "arguments": c.arguments if isinstance(c.arguments, str) else dict(c.arguments)}
            for c in step.tool_calls]
    if step.delay_ms:
        data["delay_ms"] = step.delay_ms
    if step.usage is not None:
        data["usage"] = {k: v for k, v in (("prompt_tokens", step.usage.prompt_tokens),
                                           ("completion_tokens", step.usage.completion_tokens))
                         if v is not None}
    return data


def _step_from_data(data: Any, index: int) -> Step:
    where = f"step {index}"
    if not isinstance(data, Mapping):
        raise ScriptError(f"{where}: a step is a JSON object")
    extra = set(data) - _STEP_KEYS
    if extra:
        raise ScriptError(f"{where}: unknown keys {sorted(extra)}")
    text = data.get("text")
    if text is not None and not isinstance(text, str):
        raise ScriptError(f"{where}: 'text' must be a string")
    calls: list[ToolCall] = []
    raw_calls = data.get("tool_calls")
    if raw_calls is not None:
        if not isinstance(raw_calls, list):
            raise ScriptError(f"{where}: 'tool_calls' must be a list")
        for call in raw_calls:
            if not isinstance(call, Mapping) or set(call) - {"name", "arguments"}:
                raise ScriptError(f"{where}: a tool call is {{\"name\", \"arguments\"}}")
            name, arguments = call.get("name"), call.get("arguments", {})
            if not isinstance(name, str):
                raise ScriptError(f"{where}: a tool call needs a 'name' string")
            if isinstance(arguments, str):  # verbatim, possibly malformed on purpose
                calls.append(ToolCall(name, arguments))
                continue
            if not isinstance(arguments, Mapping):
                raise ScriptError(f"{where}: tool call 'arguments' must be an object or a string")
            calls.append(ToolCall(name, dict(arguments)))
    delay_ms = _non_negative_int(data.get("delay_ms", 0), f"{where}: delay_ms")
    usage: UsageOverride | None = None
    raw_usage = data.get("usage")
    if raw_usage is not None:
        if not isinstance(raw_usage, Mapping) or set(raw_usage) - _USAGE_KEYS:
            raise ScriptError(f"{where}: 'usage' is {{\"prompt_tokens\", \"completion_tokens\"}}")
        usage = UsageOverride(
            *(None if raw_usage.get(k) is None
              else _non_negative_int(raw_usage[k], f"{where}: usage.{k}")
              for k in ("prompt_tokens", "completion_tokens"))
        )
    try:
        return Step(text=text, tool_calls=tuple(calls), delay_ms=delay_ms, usage=usage)
    except ScriptError as exc:
        raise ScriptError(f"{where}: {exc.detail}") from None


def _non_negative_int(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ScriptError(f"{what} must be a non-negative integer")
    return value
