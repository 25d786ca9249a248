"""Repeat detection (ADR 0031), pure: a run whose model keeps asking for the same thing.

Two shapes are caught, both counted against the agent's ``repeat_limit`` (N):

- the same tool with the same (canonical) arguments N times in a row, across replies;
- a cycle of identical model replies (same text, same calls): one reply N times in a row,
  or a block of two or three replies N times over (A,B,A,B,A,B).

The N-th time, the call is not made: the model gets a tool error naming the repeat. Once
more and the run stops (``BudgetStopped{limit: repeat_limit, reason: repeating}``). Only
the model's requests count, never the tools' answers: a call that keeps failing the same
way is caught too."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from tenantry.jsonutil import canonical, loads
from tenantry.runs.state import Reply

LIMIT = "repeat_limit"
REPEATING = "repeating"
#: The longest block of replies looked for as a cycle.
MAX_CYCLE = 3
#: How much of a call's arguments the tool error quotes.
QUOTE_CHARS = 200


@dataclass(frozen=True, slots=True)
class Repeat:
    """This is the ``times``-th time in a row that ``what`` happens."""

    times: int
    what: str

    def message(self, limit: int) -> str:
        """The tool error the model gets instead of a result."""
        return (f"not run: {self.what} {self.times} times in a row (the agent's repeat "
                f"limit is {limit}). Try something different: one more repeat stops the run.")


def _call_print(call: dict[str, Any]) -> tuple[str, str]:
    """A call as (tool, canonical arguments); arguments that are not JSON count as written."""
    raw = call.get("arguments") or "{}"
    try:
        arguments = canonical(loads(raw) if isinstance(raw, str) else raw).decode()
    except ValueError:
        arguments = str(raw)
    return str(call.get("name") or ""), arguments


def _reply_print(reply: Reply) -> tuple[str, tuple[tuple[str, str], ...]]:
    return reply.text, tuple(_call_print(call) for call in reply.calls)


def check(replies: list[Reply], call_index: int, limit: int) -> Repeat | None:
    """Whether call ``call_index`` of the last reply is a repeat that counts (the limit-th
    time or later), and which: the same call first, then a cycle of replies."""
    if limit <= 0 or not replies:
        return None
    same = _same_call(replies, call_index)
    if same.times >= limit:
        return same
    return _cycle(replies, limit)


def _calls_before(replies: list[Reply], call_index: int) -> Iterator[dict[str, Any] | None]:
    """The calls before this one, latest first (None: a reply without calls, a break)."""
    yield from reversed(replies[-1].calls[:call_index])
    for reply in reversed(replies[:-1]):
        if not reply.calls:
            yield None
        yield from reversed(reply.calls)


def _same_call(replies: list[Reply], call_index: int) -> Repeat:
    this = _call_print(replies[-1].calls[call_index])
    times = 1
    for call in _calls_before(replies, call_index):
        if call is None or _call_print(call) != this:
            break
        times += 1
    tool, arguments = this
    quoted = arguments if len(arguments) <= QUOTE_CHARS else arguments[:QUOTE_CHARS] + "…"
    return Repeat(times, f"{tool or 'a tool without a name'} was called with the same "
                         f"arguments {quoted}")


def _cycle(replies: list[Reply], limit: int) -> Repeat | None:
    """The last replies repeat a block of 1..MAX_CYCLE replies ``limit`` times or more."""
    prints = [_reply_print(reply) for reply in replies[-(MAX_CYCLE * (limit + 1)):]]
    for period in range(1, MAX_CYCLE + 1):
        if len(prints) < period:
            break
        length = period  # the longest suffix with this period
        while (length < len(prints)
               and prints[-1 - length] == prints[-1 - length + period]):
            length += 1
        if length >= limit * period:  # the limit-th time; past it, the one after
            times = -(-length // period)
            block = "the same reply" if period == 1 else f"the same {period} replies"
            return Repeat(times, f"the model sent {block}")
    return None
