"""Run inputs that carry their own script for the fake model (tenantry.models.scripted)."""

from __future__ import annotations


def scripted(*steps: dict[str, object], text: str = "go") -> dict[str, object]:
    """A run input carrying its own script for the fake model (see tenantry.models.scripted)."""
    return {"script": list(steps), "input": text}


def call(name: str, **arguments: object) -> dict[str, object]:
    return {"tool_calls": [{"name": name, "arguments": arguments}]}


def answer(text: str) -> dict[str, object]:
    return {"text": text}


def saying(text: str, step: dict[str, object]) -> dict[str, object]:
    """``step`` (tool calls) with the text the model says before them."""
    return {**step, "text": text}
