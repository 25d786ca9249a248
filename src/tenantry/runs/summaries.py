"""Summarization's pure half (ADR 0031): whether the next prompt must be summarized first,
which steps the summary replaces, and the prompt that asks for it. A function of the run's
state and its agent version only, so replay re-derives every summarizing prompt and every
prompt after it. The driver's half (the call, its billing) is ``model_step.summarize``."""

from __future__ import annotations

from typing import Any

from tenantry.agents.spec import AgentSpec
from tenantry.models.summaries import SUMMARY_REQUEST, summary_message
from tenantry.runs import conversation
from tenantry.runs.state import RunState

#: The message that asks for the summary, after the steps to summarize.
REQUEST = {"role": "user", "content": SUMMARY_REQUEST}


def due(state: RunState, spec: AgentSpec) -> int | None:
    """The ``upto_seq`` of the summary the run needs before its next model call, or None.

    Due when the prompt the call would send, with the summary request after it, passes
    ``after_tokens`` — so that the summarizing prompt too (that prompt less the kept steps,
    plus the request) stays within the threshold plus the one step that crossed it — and
    some step is left to fold in besides the last ``keep_last_steps``. The cut is always
    between one model reply and the next: a reply's tool calls and their results go to the
    same side (the next call is decided only once every call of the last reply has its
    result)."""
    policy = spec.summarize
    if policy is None:
        return None
    prompt = conversation.messages(state, spec)
    if conversation.estimate_tokens([*prompt, REQUEST]) <= policy.after_tokens:
        return None
    unsummarized = state.replies[conversation.summarized_replies(state):]
    if len(unsummarized) <= policy.keep_last_steps:
        return None  # nothing to fold in: the kept steps alone pass the threshold
    if policy.keep_last_steps == 0:
        return state.last_seq
    return unsummarized[-policy.keep_last_steps].seq - 1


def request(state: RunState, spec: AgentSpec, upto_seq: int) -> list[dict[str, Any]]:
    """The summarizing prompt: the conversation as far as ``upto_seq`` (an earlier summary
    included, so the new one covers every step from the first), then SUMMARY_REQUEST. It
    begins as the run's own prompts do, so a provider's prompt cache serves that part."""
    prompt = conversation.head(state, spec)
    covered = conversation.summarized_replies(state)
    if state.summary is not None:
        prompt.append(summary_message(covered, state.summary.text))
    folded = [reply for reply in state.replies[covered:] if reply.seq <= upto_seq]
    return [*prompt, *conversation.steps(folded), REQUEST]


def model(spec: AgentSpec) -> str:
    """Who writes the summary: the policy's model, else the agent's own."""
    return (spec.summarize.model if spec.summarize is not None else None) or spec.model
