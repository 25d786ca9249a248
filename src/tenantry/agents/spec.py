"""An agent version's contents: a frozen value, stored as JSON and never changed."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True)
class Limits:
    max_steps: int = 50
    max_tokens: int = 200_000
    max_cost_micros: int = 5_000_000  # $5
    # The same tool call (or cycle of replies) this many times in a row is refused with a
    # tool error naming it; once more stops the run (ADR 0031). 0: off — what a version
    # stored before repeat detection existed reads as (its runs must not change).
    repeat_limit: int = 3


@dataclass(frozen=True, slots=True)
class SandboxPolicy:
    egress: tuple[str, ...] = ()
    #: The version's code passes each call's idempotency key (TENANTRY_IDEMPOTENCY_KEY) on
    #: to the hosts it reaches, which honour it: a code call interrupted by a crash is then
    #: made again with the same key, instead of being recorded ``unknown``.
    code_honours_keys: bool = False


@dataclass(frozen=True, slots=True)
class ChildAgent:
    """An agent this version may start as a child run (its own run, log, lease and budget).
    ``version`` None: the child agent's latest version at the moment of the call. ``name``
    is the agent's name when the version was published: what the model is shown."""

    agent_id: str
    version: int | None = None
    name: str = ""


@dataclass(frozen=True, slots=True)
class SummarizePolicy:
    """Opt-in summarization (ADR 0031): when the next prompt, with the summarizing request,
    would pass ``after_tokens`` (estimated from its bytes), the steps before the last
    ``keep_last_steps`` are replaced by a summary written by ``model`` (None: the agent's
    own model)."""

    after_tokens: int
    keep_last_steps: int = 2
    model: str | None = None


@dataclass(frozen=True, slots=True)
class AgentSpec:
    model: str
    system_prompt: str
    tools: tuple[str, ...] = ()
    # Tools that park the run for a human decision before each call (a subset of tools).
    needs_approval: tuple[str, ...] = ()
    fallback_models: tuple[str, ...] = ()
    limits: Limits = field(default_factory=Limits)
    sandbox: SandboxPolicy = field(default_factory=SandboxPolicy)
    # Agents the model may start through the built-in start_agent tool (child runs).
    children: tuple[ChildAgent, ...] = ()
    summarize: SummarizePolicy | None = None

    def to_json(self) -> dict[str, Any]:
        value = asdict(self)
        # tuples become lists so stored JSON and API JSON look alike
        for key in ("tools", "needs_approval", "fallback_models"):
            value[key] = list(value[key])
        value["sandbox"]["egress"] = list(value["sandbox"]["egress"])
        if not self.sandbox.code_honours_keys:  # versions without it keep their JSON
            del value["sandbox"]["code_honours_keys"]
        # Written only when set: versions published before child runs keep their JSON.
        if self.children:
            value["children"] = [asdict(child) for child in self.children]
        else:
            del value["children"]
        if value["summarize"] is None:  # versions without it are stored as before
            del value["summarize"]
        return value

    @classmethod
    def from_json(cls, value: dict[str, Any]) -> AgentSpec:
        return cls(
            model=value["model"],
            system_prompt=value["system_prompt"],
            tools=tuple(value.get("tools", ())),
            needs_approval=tuple(value.get("needs_approval", ())),
            fallback_models=tuple(value.get("fallback_models", ())),
            # A version stored before repeat detection has no repeat_limit: off for it.
            limits=Limits(**{"repeat_limit": 0, **value.get("limits", {})}),
            sandbox=SandboxPolicy(
                egress=tuple(value.get("sandbox", {}).get("egress", ())),
                code_honours_keys=bool(value.get("sandbox", {}).get("code_honours_keys"))),
            children=tuple(ChildAgent(**child) for child in value.get("children", ())),
            summarize=(SummarizePolicy(**value["summarize"]) if value.get("summarize")
                       else None),
        )
