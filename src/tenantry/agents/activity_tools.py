"""Activities as tools (ADR 0015): how an agent version names one of its tenant's
activities in its ``tools`` list, and what the model is shown for it.

``activity:<name>`` calls the activity's latest version at the moment of the call (as
enqueueing without a version does); ``activity:<name>@<n>`` always calls version ``n``,
the way a version pins what it was published against. The model sees a plain function
name (providers allow only ``[A-Za-z0-9_-]{1,64}``): the activity's name with every other
character turned into ``_``; a version whose tools would show the model one name twice
is refused at publishing.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

PREFIX = "activity:"
#: The model "runs" of an activity's own agent version: nothing a platform worker drives.
ACTIVITY_MODEL = "activity"
_ENTRY = re.compile(r"^activity:([A-Za-z0-9][A-Za-z0-9_.:/-]{0,127}?)(?:@([1-9][0-9]{0,8}))?$")
_NOT_FUNCTION_CHAR = re.compile(r"[^A-Za-z0-9_-]")
#: Every activity accepts any JSON object as its input (activity versions carry no schema).
INPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "description": "The activity's input: any JSON object.",
    "additionalProperties": True,
}


@dataclass(frozen=True, slots=True)
class ActivityTool:
    entry: str  # as listed in the version's tools: "activity:send_invoice@2"
    name: str  # the activity: "send_invoice"
    version: int | None  # None: the latest at the moment of the call

    @property
    def function_name(self) -> str:
        """What the model calls it."""
        return _NOT_FUNCTION_CHAR.sub("_", self.name)[:64]

    def definition(self) -> dict[str, Any]:
        """The OpenAI ``tools`` entry offered to the model."""
        pinned = f", version {self.version}" if self.version is not None else ""
        return {"type": "function", "function": {
            "name": self.function_name,
            "description": f"Runs the tenant's activity {self.name!r}{pinned} with the "
                           "arguments object as its input and returns its JSON result. "
                           "The run waits until the activity has finished.",
            "parameters": INPUT_SCHEMA}}


def parse(entry: str) -> ActivityTool | None:
    """The activity a tools entry names; None when it is not an ``activity:`` entry (or
    is one that names no activity a tenant could have)."""
    if not entry.startswith(PREFIX):
        return None
    match = _ENTRY.fullmatch(entry)
    if match is None:
        return None
    version = match.group(2)
    return ActivityTool(entry, match.group(1), int(version) if version else None)


def is_activity_entry(entry: str) -> bool:
    return entry.startswith(PREFIX)


def resolve(tools: Iterable[str], called: str) -> ActivityTool | None:
    """The activity entry of ``tools`` that the model's ``called`` name means: the entry
    itself, or its function name. None: ``called`` is not an activity of this version."""
    for entry in tools:
        found = parse(entry)
        if found is not None and called in (entry, found.function_name):
            return found
    return None


def problems(tools: Iterable[str]) -> list[str]:
    """What is wrong with a version's tools list on the activities' side: an ``activity:``
    entry that is not ``activity:<name>[@<version>]``, or two tools the model would see
    under one name."""
    found: list[str] = []
    shown: dict[str, str] = {}
    for entry in tools:
        tool = parse(entry)
        if is_activity_entry(entry) and tool is None:
            found.append(f"{entry!r} is not activity:<name> or activity:<name>@<version>")
            continue
        name = tool.function_name if tool is not None else entry
        if name in shown:
            found.append(f"{shown[name]!r} and {entry!r} would both be shown to the model "
                         f"as {name!r}")
        shown.setdefault(name, entry)
    return found
