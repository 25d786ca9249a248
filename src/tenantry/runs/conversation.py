"""Rebuilding the model conversation from the run's state (OpenAI chat message shape)."""

from __future__ import annotations

from typing import Any

from tenantry.agents.spec import AgentSpec
from tenantry.jsonutil import canonical, digest
from tenantry.runs.state import RunState


def input_text(value: Any) -> str:
    return value if isinstance(value, str) else canonical(value).decode()


def tool_message_content(completed: dict[str, Any]) -> str:
    if "result" in completed:
        return str(completed["result"])
    if completed.get("outcome") == "unknown":
        return ("UNKNOWN OUTCOME: the platform cannot tell whether this call took effect. "
                "Check before trying again.")
    return f"ERROR: {completed.get('error', 'the tool call failed')}"


def messages(state: RunState, spec: AgentSpec) -> list[dict[str, Any]]:
    conversation: list[dict[str, Any]] = [
        {"role": "system", "content": spec.system_prompt},
        {"role": "user", "content": input_text(state.input)},
    ]
    for reply in state.replies:
        assistant: dict[str, Any] = {"role": "assistant", "content": reply.text or None}
        if reply.calls:
            assistant["tool_calls"] = [
                {"id": call["id"], "type": "function",
                 "function": {"name": call["name"], "arguments": call["arguments"]}}
                for call in reply.calls
            ]
        conversation.append(assistant)
        for index, call in enumerate(reply.calls):
            if index in reply.completed:
                conversation.append({
                    "role": "tool", "tool_call_id": call["id"],
                    "content": tool_message_content(reply.completed[index]),
                })
    return conversation


def prompt_digest(conversation: list[dict[str, Any]]) -> str:
    """Recorded with each reply, so replay notices if the same log builds another prompt."""
    return digest(conversation).hex()[:32]
