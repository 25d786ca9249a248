"""The fence around tool output in a prompt (invariant 10; docs/reference/security.md, "Model
context"): data from a tool is shown to the model between one
``<tool_output tool="..." status="...">`` line and one ``</tool_output>`` line, and nothing
inside can end the fence early or start another.

Models read tags loosely, so what is neutralised is anything a reader could take for a fence
tag, not only the exact one: ``</TOOL_OUTPUT>``, ``</Tool_Output >``, ``< /tool_output``,
and opening tags too. A backslash goes after the ``<`` (``<\\/tool_output``, ``<\\tool_output``):
the text stays readable and no longer spells a tag. The tool name comes from the model's
call (and so perhaps from injected text): it is entity-escaped, so a quote or ``>`` cannot
leave the attribute."""

from __future__ import annotations

import html
import re

__all__ = ["TAG", "fence"]

TAG = "tool_output"

# "<", optional whitespace, an optional "/", optional whitespace, then the tag's name, in
# any case: everything that could open or close a fence.
_TAG_LIKE = re.compile(r"<\s*(/?)\s*tool_output", re.IGNORECASE)


def fence(tool: str, body: str, status: str) -> str:
    """``body`` fenced as the output of ``tool``; ``status`` is ours (ok, error, unknown)."""
    name = html.escape(tool, quote=True)
    return f'<{TAG} tool="{name}" status="{status}">\n{_defused(body)}\n</{TAG}>'


def _defused(body: str) -> str:
    # The exact lower-case close keeps the form earlier logs were fenced with, so replayed
    # prompts (and their recorded digests) are unchanged for them.
    return _TAG_LIKE.sub(lambda m: f"<\\{m.group(1)}{m.group(0)[-len(TAG):]}", body)
