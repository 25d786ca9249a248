"""Child runs as a tool: the built-in ``start_agent`` tool an agent version gets when it
names agents it may start (``children``), and what the model is shown for it.

One tool for every child, not one per child: the model picks the agent by name, the list
of names is the allow-list (an agent not on it is refused with a tool error), and a
version's tool names stay what the tenant wrote."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from tenantry.agents.spec import ChildAgent

TOOL = "start_agent"


def definition(children: Iterable[ChildAgent]) -> dict[str, Any]:
    """The OpenAI ``tools`` entry offered to the model."""
    named = list(children)
    listed = "; ".join(f"{c.name or c.agent_id} ({c.agent_id})" for c in named)
    return {"type": "function", "function": {
        "name": TOOL,
        "description": "Starts another agent as a child run with `input` as its task, waits "
                       "until it has ended, and returns its answer (or why it failed). "
                       f"Agents you may start: {listed}.",
        "parameters": {
            "type": "object",
            "properties": {
                "agent": {"type": "string", "description": "The agent's name or id.",
                          "enum": [c.name or c.agent_id for c in named]},
                "input": {"type": "string", "description": "The child's task."},
            },
            "required": ["agent", "input"],
            "additionalProperties": False,
        }}}


def find(children: Iterable[ChildAgent], agent: object) -> ChildAgent | None:
    """The child a call names, by name or by id; None when it is not one of them."""
    if not isinstance(agent, str):
        return None
    for child in children:
        if agent in (child.name, child.agent_id):
            return child
    return None
