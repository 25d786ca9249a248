"""Tenant API: agents and their immutable versions."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Response
from pydantic import BaseModel, Field, field_validator, model_validator

from tenantry.activities.code import versions as activity_versions
from tenantry.agents import activity_tools, child_tools, flags, service, snapshots
from tenantry.agents.spec import AgentSpec, ChildAgent, Limits, SandboxPolicy, SummarizePolicy
from tenantry.api.auth import AgentsManager, PlatformDep, RunsReader
from tenantry.api.fields import Body, EgressHost, PositiveInt4, Text
from tenantry.api.links import links, to
from tenantry.api.pagination import PageRequest, keyed_by
from tenantry.api.params import parse_or_404, positive_int4_or_404
from tenantry.api.platform import Platform
from tenantry.errors import Conflict, NotFound, UnpricedModel
from tenantry.ids import AgentId, TenantId
from tenantry.ledger.prices import PriceBook, how_to_price
from tenantry.sandbox.egress import EgressPolicy

router = APIRouter(prefix="/v1/agents", tags=["agents"])
_AgentPage = Annotated[PageRequest, Depends(keyed_by(AgentId.pattern()))]

# A tool's name, or one of the tenant's activities: activity:<name>[@<version>] (ADR 0015).
ToolName = Annotated[str, Field(
    pattern=r"^([A-Za-z0-9_.-]{1,64}|activity:[A-Za-z0-9][A-Za-z0-9_.:/-]{0,127}"
            r"(@[1-9][0-9]{0,8})?)$")]
#: An entry of a version's tools: any tool name but the built-in `start_agent` (ChildBody).
VersionTool = Annotated[ToolName, Field(json_schema_extra={"not": {"const": child_tools.TOOL}})]
_DEFAULTS = Limits()


class LimitsBody(Body):
    max_steps: int = Field(default=_DEFAULTS.max_steps, ge=1, le=10_000)
    max_tokens: int = Field(default=_DEFAULTS.max_tokens, ge=1, le=1_000_000_000)
    max_cost_micros: int = Field(default=_DEFAULTS.max_cost_micros, ge=0, le=10**12)
    repeat_limit: int = Field(
        default=_DEFAULTS.repeat_limit, ge=0, le=100, json_schema_extra={"not": {"const": 1}},
        description="The same tool call with the same arguments (or a cycle of identical "
                    "replies) this many times in a row is refused with a tool error; once "
                    "more stops the run (reason `repeating`). 0 turns it off; 1 is refused "
                    "(every call would be a repeat).")

    @field_validator("repeat_limit")
    @classmethod
    def _not_one(cls, value: int) -> int:
        if value == 1:
            raise ValueError("repeat_limit must be 0 (off) or at least 2")
        return value


class SummarizeBody(Body):
    """Opt-in summarization of long runs (ADR 0031)."""

    after_tokens: int = Field(
        ge=256, le=10_000_000,
        description="When the prompt of the next model call, with the summarizing request "
                    "after it, would pass this many tokens (estimated: UTF-8 bytes / 4, plus 4 "
                    "a message), the steps before the last `keep_last_steps` are replaced by a "
                    "summary first.")
    keep_last_steps: int = Field(
        default=2, ge=0, le=100,
        description="The latest steps (a model reply and its tool results) kept in full.")
    model: Annotated[Text, Field(min_length=1, max_length=200)] | None = Field(
        default=None, description="The model that writes the summary; default: the agent's.")


class SandboxBody(Body):
    egress: list[EgressHost] = Field(default_factory=list, max_length=64)
    code_honours_keys: bool = Field(
        default=False,
        description="This version's code passes each call's idempotency key (the "
                    "`TENANTRY_IDEMPOTENCY_KEY` environment variable, or the file "
                    "`/tmp/tenantry/idempotency-key`) on to the hosts it reaches, and they "
                    "honour it: a `run_python`/`run_shell` call cut short by a crash is then "
                    "made again with the same key. Without it, a code call of a version with "
                    "egress hosts is never repeated: its outcome is recorded `unknown`.")

    @field_validator("egress")
    @classmethod
    def _egress_entries(cls, hosts: list[str]) -> list[str]:
        # The proxy's own parser judges each entry too (it takes every entry of the
        # pattern): a version that saves is one its sandboxes can enforce.
        for index, host in enumerate(hosts):
            try:
                EgressPolicy((host,))
            except ValueError as exc:
                raise ValueError(f"sandbox.egress[{index}]: {exc}") from None
        return hosts


class ChildBody(Body):
    """An agent this version may start as a child run through the `start_agent` tool."""

    agent_id: Text = Field(min_length=1, max_length=64,
                           description="One of this tenant's agents (it may be this one).")
    version: PositiveInt4 | None = Field(
        default=None, description="Pin the child's version; omitted: its latest at the "
                                  "moment of the call.")


class ChildOut(BaseModel):
    agent_id: str
    version: int | None
    name: str = Field(description="The agent's name when this version was published: "
                                  "what the model picks it by.")


class VersionBody(Body):
    """The contents of one immutable version."""

    model: Text = Field(min_length=1, max_length=200)
    fallback_models: list[Annotated[Text, Field(min_length=1, max_length=200)]] = Field(
        default_factory=list, max_length=8
    )
    system_prompt: Text = Field(max_length=100_000)
    tools: list[VersionTool] = Field(
        default_factory=list, max_length=128, json_schema_extra={"uniqueItems": True},
        description="Tool names (a registered server's) and `activity:<name>[@<version>]` "
                    "entries (each an activity of this tenant); no two the model would see "
                    "under one name (`activity:a.b` is shown as `a_b`).")
    needs_approval: list[ToolName] = Field(
        default_factory=list, max_length=128,
        description="Tools of `tools` whose calls wait for a human's approval.")
    limits: LimitsBody = Field(default_factory=LimitsBody)
    sandbox: SandboxBody = Field(default_factory=SandboxBody)
    children: list[ChildBody] = Field(
        default_factory=list, max_length=32,
        description="Agents the model may start as child runs (the built-in `start_agent` "
                    "tool), each agent once, no two of the same name; each child is its own "
                    "run, and the parent waits for it without holding a slot.")
    summarize: SummarizeBody | None = None

    @model_validator(mode="after")
    def _consistent(self) -> VersionBody:
        if len(set(self.tools)) != len(self.tools):
            raise ValueError("tools lists a name twice")
        if child_tools.TOOL in self.tools:
            raise ValueError(f"tools: {child_tools.TOOL!r} is the built-in tool of child "
                             "runs: list the agents under children instead")
        if len({c.agent_id for c in self.children}) != len(self.children):
            raise ValueError("children lists an agent twice")
        missing = sorted(set(self.needs_approval) - set(self.tools))
        if missing:
            raise ValueError(f"needs_approval names tools not in tools: {missing}")
        clashes = activity_tools.problems(self.tools)
        if clashes:
            raise ValueError(f"tools: {'; '.join(clashes)}")
        return self

    def to_spec(self) -> AgentSpec:
        return AgentSpec(
            model=self.model,
            system_prompt=self.system_prompt,
            tools=tuple(self.tools),
            needs_approval=tuple(dict.fromkeys(self.needs_approval)),
            fallback_models=tuple(self.fallback_models),
            limits=Limits(**self.limits.model_dump()),
            sandbox=SandboxPolicy(egress=tuple(self.sandbox.egress),
                                  code_honours_keys=self.sandbox.code_honours_keys),
            summarize=(SummarizePolicy(**self.summarize.model_dump())
                       if self.summarize is not None else None),
        )


class CreateAgent(VersionBody):
    name: Text = Field(min_length=1, max_length=200)


class NewVersion(VersionBody):
    version: PositiveInt4 | None = Field(
        default=None,
        description="The number you expect to create; naming an existing one is refused (409).",
    )


class AgentOut(BaseModel):
    agent_id: str
    name: str
    version: int = Field(description="The version shown (GET /v1/agents/{id}: the latest).")
    live_version: int = Field(
        description="What a run without a version runs. Publishing a version does not "
                    "change it; POST /v1/agents/{id}/promote does.")
    created_at: datetime
    model: str
    fallback_models: list[str]
    system_prompt: str
    tools: list[str]
    needs_approval: list[str]
    limits: LimitsBody
    sandbox: SandboxBody
    children: list[ChildOut] = Field(default_factory=list)
    summarize: SummarizeBody | None = None
    tool_pins: dict[str, dict[str, str]] = Field(
        description="For each tool: the registered server that served it when this version "
                    "was published, and the hash of that server's pinned tool list. A call "
                    "is made only while that server serves exactly that list.")
    flagged_for_review: ReviewFlagOut | None = Field(
        default=None,
        description="Set once this version's sandboxes had more refused egress attempts "
                    "than the operator's threshold (TENANTRY_EGRESS_FLAG_THRESHOLD); null "
                    "otherwise.")
    model_snapshot_changed: bool = Field(
        default=False,
        description="True when a provider served one of the agent's models (any version's) "
                    "with another snapshot than the accepted one: see "
                    "`GET /v1/agents/{agent_id}/model-snapshots`. False for a new agent.")


class ReviewFlagOut(BaseModel):
    reason: str = Field(description="Why: `egress_refused` (its sandboxes kept trying to "
                                    "reach what the allow-list does not allow).")
    since: datetime = Field(description="When the version was flagged.")
    refused_egress: int = Field(description="Refused egress attempts counted so far, over "
                                            "all the version's runs.")


class AgentSummaryOut(BaseModel):
    agent_id: str
    name: str
    latest_version: int
    live_version: int
    created_at: datetime


class AgentList(BaseModel):
    data: list[AgentSummaryOut]
    next_cursor: str | None


NOT_FOUND = service.NOT_FOUND


def _out(v: service.AgentVersion, flag: flags.ReviewFlag | None = None, *,
         snapshot_changed: bool = False) -> AgentOut:
    spec = v.spec.to_json()
    flagged = None if flag is None else ReviewFlagOut(
        reason=flag.reason, since=flag.since, refused_egress=flag.refused_egress)
    return AgentOut(agent_id=str(v.agent_id), name=v.name, version=v.version,
                    live_version=v.live_version, created_at=v.created_at, tool_pins=v.tool_pins,
                    flagged_for_review=flagged, model_snapshot_changed=snapshot_changed,
                    **spec)


async def _flagged_out(p: Platform, tenant: TenantId, v: service.AgentVersion) -> AgentOut:
    return _out(v, await flags.review_flag(p.db, tenant, v.agent_id, v.version),
                snapshot_changed=await snapshots.any_changed(p.db, tenant, v.agent_id))


async def _check_activities(p: Platform, tenant: TenantId, body: VersionBody) -> None:
    """Every ``activity:`` tool names an activity (and version) the tenant has: checked
    before anything is written. Activity versions are never deleted, so what exists now
    exists when the version's runs call it."""
    for entry in body.tools:
        tool = activity_tools.parse(entry)
        if tool is None:
            continue
        try:
            await activity_versions.get(p.db, tenant, tool.name, tool.version)
        except NotFound:
            pinned = f" at version {tool.version}" if tool.version is not None else ""
            raise Conflict(
                f"tools: {entry!r} names no activity of this tenant{pinned}; publish it "
                "with POST /v1/activities first", field="tools") from None


async def _check_priced(p: Platform, body: VersionBody) -> None:
    """Every model the version may call is priced now: an unpriced model is never served,
    so its runs could only fail. (Prices are never withdrawn; a run of an agent published
    before this check, or on a built-in default a later release drops, still fails with
    ``unpriced_model`` before its first call.)"""
    named = {"model": [body.model], "fallback_models": body.fallback_models,
             "summarize.model": [body.summarize.model] if body.summarize and
             body.summarize.model else []}
    prices = PriceBook(p.db)
    unpriced = {model: field for field, models in named.items() for model in models
                if not await prices.is_priced(model)}
    if unpriced:
        field = next(iter(unpriced.values()))
        raise UnpricedModel(f"{field}: {how_to_price(unpriced)}; until then this agent "
                            "cannot be published (its runs could not be served)",
                            field=field, models=list(unpriced))


async def _children(p: Platform, tenant: TenantId, body: VersionBody) -> AgentSpec:
    """The version's spec, each child checked to be an agent (and version) of this tenant
    and named as the model will see it. Versions are never deleted, so what exists now
    exists when the version's runs start it."""
    children = []
    for index, child in enumerate(body.children):
        field = f"children[{index}]"
        try:
            agent = AgentId.parse(child.agent_id)
            found = (await service.get_agent(p.db, tenant, agent) if child.version is None
                     else await service.get_version(p.db, tenant, agent, child.version))
        except (ValueError, NotFound):
            pinned = f" at version {child.version}" if child.version is not None else ""
            raise Conflict(f"{field}: {child.agent_id!r} names no agent of this "
                           f"tenant{pinned}", field=field) from None
        children.append(ChildAgent(str(agent), child.version, found.name))
    names = [c.name for c in children]
    if len(set(names)) != len(names):
        raise Conflict("children: two agents have the same name", field="children")
    return replace(body.to_spec(), children=tuple(children))


#: What the body names must exist: a well-formed name of nothing is the tenant's data
#: (409), not a malformed request (400).
_PUBLISH_RESPONSES: dict[int | str, dict[str, Any]] = {409: {
    "description": "`conflict` (with `field`): an `activity:` tool names an activity (or "
                   "version) the tenant does not have, a child names an agent (or version) "
                   "it does not have, or two children have the same name."}, 422: {
    "description": "`unpriced_model`: the model, a fallback model or the summaries' model "
                   "has no price (the problem's `models` names them; the detail says how "
                   "the operator prices each: `PUT /admin/v1/prices/{model}`)."}}


_THE_AGENT = {"agent_id": "$response.body#/agent_id"}
_CREATED = links(
    GetAgent=to("GET", "/v1/agents/{agent_id}", "The agent just created.",
                parameters=_THE_AGENT),
    GetVersion=to("GET", "/v1/agents/{agent_id}/versions/{version}", "Its version 1.",
                  parameters={**_THE_AGENT, "version": "$response.body#/version"}),
    NewVersion=to("POST", "/v1/agents/{agent_id}/versions", "Publish its next version.",
                  parameters=_THE_AGENT),
    # Without a webhook: the run's own links lead on to its deletion, which waits for a
    # webhook's delivery (409 webhook_pending).
    StartRun=to("POST", "/v1/runs", "Run it.",
                body={"agent_id": "$response.body#/agent_id", "input": "Hello",
                      "webhook": None}),
    CreateTestSet=to("POST", "/v1/agents/{agent_id}/test-sets", "Cases to evaluate its "
                     "versions on.", parameters=_THE_AGENT))
_PUBLISHED = links(
    GetVersion=to("GET", "/v1/agents/{agent_id}/versions/{version}", "The version just "
                  "published.", parameters={"agent_id": "$request.path.agent_id",
                                            "version": "$response.body#/version"}),
    Promote=to("POST", "/v1/agents/{agent_id}/promote", "Make it the live version.",
               parameters={"agent_id": "$request.path.agent_id"},
               body={"version": "$response.body#/version"}))


@router.post("", status_code=201, response_model=AgentOut,
             responses={201: _CREATED, **_PUBLISH_RESPONSES})
async def create_agent(
    body: CreateAgent, response: Response, tenant: AgentsManager, p: PlatformDep,
) -> AgentOut:
    """Create an agent.

    Its version 1 (model, system prompt, tools, approvals, limits), which is also its live
    version. Versions are immutable: change an agent by publishing a new version."""
    await _check_activities(p, tenant, body)
    await _check_priced(p, body)
    created = await service.create_agent(p.db, tenant, body.name,
                                         await _children(p, tenant, body))
    response.headers["Location"] = f"/v1/agents/{created.agent_id}"
    return _out(created)


@router.get("", response_model=AgentList)
async def list_agents(page: _AgentPage, tenant: RunsReader, p: PlatformDep) -> AgentList:
    """List agents.

    The tenant's agents, newest first, each at its latest version."""
    agents = await service.list_agents(p.db, tenant, before=page.position(AgentId.parse),
                                       limit=page.limit)
    return page.answer(AgentList, agents, _summary_out, key=lambda a: str(a.agent_id))


def _summary_out(a: service.AgentSummary) -> AgentSummaryOut:
    return AgentSummaryOut(agent_id=str(a.agent_id), name=a.name,
                           latest_version=a.latest_version, live_version=a.live_version,
                           created_at=a.created_at)


@router.get("/{agent_id}", response_model=AgentOut)
async def get_agent(agent_id: str, tenant: RunsReader, p: PlatformDep) -> AgentOut:
    """Get an agent.

    The agent at its latest version, with the version runs use when they name none
    (`live_version`)."""
    agent = parse_or_404(AgentId, agent_id, NOT_FOUND)
    return await _flagged_out(p, tenant, await service.get_agent(p.db, tenant, agent))


@router.post("/{agent_id}/versions", status_code=201, response_model=AgentOut,
             responses={201: _PUBLISHED, **_PUBLISH_RESPONSES})
async def create_version(
    agent_id: str, body: NewVersion, response: Response, tenant: AgentsManager, p: PlatformDep,
) -> AgentOut:
    """Publish a new version of an agent.

    The next version number with the whole spec given; the live version does not change
    until it is promoted."""
    agent = parse_or_404(AgentId, agent_id, NOT_FOUND)
    await _check_activities(p, tenant, body)
    await _check_priced(p, body)
    created = await service.create_version(p.db, tenant, agent,
                                           await _children(p, tenant, body), body.version)
    response.headers["Location"] = f"/v1/agents/{agent}/versions/{created.version}"
    return _out(created, snapshot_changed=await snapshots.any_changed(p.db, tenant, agent))


@router.get("/{agent_id}/versions/{version}", response_model=AgentOut)
async def get_version(agent_id: str, version: str, tenant: RunsReader, p: PlatformDep) -> AgentOut:
    """Get a version of an agent.

    The agent's spec exactly as that version was published."""
    agent = parse_or_404(AgentId, agent_id, NOT_FOUND)
    number = positive_int4_or_404(version, service.VERSION_NOT_FOUND)
    return await _flagged_out(p, tenant,
                              await service.get_version(p.db, tenant, agent, number))


async def change_version(agent_id: str, version: str, tenant: RunsReader, p: PlatformDep) -> None:
    """Versions are immutable: publish a new one with ``POST /v1/agents/{id}/versions``."""
    await get_version(agent_id, version, tenant, p)  # 404 first, like any other lookup
    raise Conflict("Agent versions are immutable; publish a new version instead.")


for _method in ("PUT", "PATCH", "DELETE"):
    router.add_api_route(
        "/{agent_id}/versions/{version}", change_version, methods=[_method], status_code=409,
        response_model=None, operation_id=f"{_method.lower()}_agent_version",
        summary=f"{_method} a version (always refused: versions are immutable)",
        responses={409: {"description": "Versions are immutable"}},
    )
