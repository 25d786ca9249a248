"""The asyncio client: ``AsyncClient(...).runs``, ``.agents``, ``.approvals``,
``.evaluations``, ``.secrets``, ``.tool_servers`` — the same calls as
:class:`tenantry.client.Client`, awaited; the account's (``.api_keys``, ``.audit``,
``.users``, ``.exports``, the webhooks', ``.model_accounts``) are ``aio_account.py``'s."""

from __future__ import annotations

import builtins
from collections.abc import Iterable, Mapping
from typing import Any, Literal

import httpx2

from tenantry.client import _calls
from tenantry.client._closing import AsyncClosing
from tenantry.client._retry import OnRetry, RetryPolicy
from tenantry.client._transport import DEFAULT_TIMEOUT, AsyncResource, AsyncTransport, settings
from tenantry.client._wait import EvaluationWaiting, Waiting, poll_async
from tenantry.client.aio_account import (
    ApiKeys,
    Audit,
    Exports,
    ModelAccounts,
    Users,
    WebhookDeliveries,
    WebhookEndpoints,
    WebhookSecret,
)
from tenantry.client.evaluations import Evaluation, EvaluationSummary, TestSet, TestSetSummary
from tenantry.client.events import AsyncEventStream
from tenantry.client.models import (
    Agent,
    AgentSummary,
    Approval,
    EventPage,
    Page,
    Promotion,
    Run,
    RunBlob,
    StartedRun,
)
from tenantry.client.tool_servers import Secret, ToolServer, ToolServerConnection

__all__ = ["AsyncClient"]


class AsyncClient(AsyncClosing):
    """A tenant's client of a Tenantry platform.

    ``base_url`` and ``api_key`` default to ``TENANTRY_URL`` (else
    ``http://127.0.0.1:8080``) and ``TENANTRY_API_KEY``. ``timeout`` bounds each request
    (an event stream's reads wait at least 45 s: the platform's keepalives come every 15
    s). Calls that are safe to repeat are retried up to ``max_retries`` times within
    ``retry_deadline`` seconds (docs/how-to/client-sdk.md#retries). ``transport`` is an
    httpx2 transport to send through (a mock in tests); ``on_retry`` is told of each retry
    and why. Use it with ``async with``, or await ``aclose()``."""

    def __init__(self, base_url: str | None = None, api_key: str | None = None, *,
                 timeout: float | None = DEFAULT_TIMEOUT, max_retries: int = 4,
                 retry_deadline: float = 60.0,
                 transport: httpx2.AsyncBaseTransport | None = None,
                 on_retry: OnRetry | None = None) -> None:
        url, key = settings(base_url, api_key)
        policy = RetryPolicy(max_retries=max_retries, deadline=retry_deadline)
        self._transport = AsyncTransport(url, key, timeout=timeout, policy=policy,
                                        transport=transport)
        self._transport.on_retry = on_retry
        self.runs = Runs(self._transport)
        self.agents = Agents(self._transport)
        self.approvals = Approvals(self._transport)
        self.evaluations = Evaluations(self._transport)
        self.secrets = Secrets(self._transport)
        self.tool_servers = ToolServers(self._transport)
        self.api_keys = ApiKeys(self._transport)
        self.audit = Audit(self._transport)
        self.users = Users(self._transport)
        self.exports = Exports(self._transport)
        self.webhook_endpoints = WebhookEndpoints(self._transport)
        self.webhook_secret = WebhookSecret(self._transport)
        self.webhook_deliveries = WebhookDeliveries(self._transport)
        self.model_accounts = ModelAccounts(self._transport)

    @property
    def base_url(self) -> str:
        return self._transport.base_url

    async def aclose(self) -> None:
        await self._transport.close()


class Runs(AsyncResource):
    async def create(self, agent_id: str, input: Any, *, version: int | None = None,
                     webhook: str | None = None,
                     priority: Literal["interactive", "batch"] | None = None,
                     idempotency_key: str | None = None,
                     stream: bool = False) -> StartedRun:
        """Start a run of the agent (its latest version, or ``version``). Sent with
        ``idempotency_key`` — a new random one when None — and the same key on every
        retry: however often it is sent, one run. The same key with another body raises
        :class:`Conflict`; with the same body it returns the run it started. ``stream``:
        every model call's text comes to :meth:`events` as :class:`ModelDelta` items as it
        is written, the run's first call included."""
        return await self._t.call(_calls.create_run(
            agent_id, input, version=version, webhook=webhook, priority=priority,
            idempotency_key=idempotency_key, stream=stream))

    async def get(self, run_id: str) -> Run:
        return await self._t.call(_calls.get_run(run_id))

    async def trace(self, run_id: str) -> dict[str, Any]:
        """Where the run's wall time went, as the API answers it: contiguous spans (queue,
        platform, gateway, model, tool, approval, parked) adding up to ``wall_ms``, totals,
        fallbacks and child runs."""
        return await self._t.call(_calls.run_trace(run_id))

    async def list(self, *, status: str | None = None, limit: int | None = None,
                   cursor: str | None = None) -> Page[Run]:
        """One page of the tenant's runs, newest first."""
        return await self._t.call(_calls.list_runs(status=status, limit=limit, cursor=cursor))

    async def children(self, run_id: str, *, limit: int | None = None,
                       cursor: str | None = None) -> Page[Run]:
        """One page of the runs this run started (``GET /v1/runs/{id}/children``)."""
        return await self._t.call(_calls.run_children(run_id, limit=limit, cursor=cursor))

    async def blobs(self, run_id: str) -> builtins.list[RunBlob]:
        """The run's blobs held now: outputs over the event cap, saved files, screenshots
        (``GET /v1/runs/{id}/blobs``)."""
        return await self._t.call(_calls.run_blobs(run_id))

    async def read_blob(self, run_id: str, ref: str) -> bytes:
        """A blob's bytes, as its run's events name it (``output_ref``, ``blob_refs``,
        ``SandboxSaved.ref``). Another tenant's or run's ref: NotFound; the store not
        answering: retried as any 503, then Unavailable."""
        return await self._t.call(_calls.read_run_blob(run_id, ref))

    async def cancel(self, run_id: str) -> Run:
        """Ask the run to stop: a queued or waiting run ends at once, a running one between
        steps (the answer says ``cancel_requested``). Asking again changes nothing; a run
        that already finished or failed: Conflict (``extra['run_status']``)."""
        return await self._t.call(_calls.cancel_run(run_id))

    def events(self, run_id: str, *, after: int = 0) -> AsyncEventStream:
        """The run's events after seq ``after``, live until its last event; resumes by
        itself after a dropped connection (no gap, no repeat)."""
        return AsyncEventStream(self._t, run_id, after)

    async def events_page(self, run_id: str, *, after: int = 0,
                          limit: int | None = None) -> EventPage:
        """One JSON page of the run's log (no stream held)."""
        return await self._t.call(_calls.event_page(run_id, after=after, limit=limit))

    async def wait(self, run_id: str, *,
                   timeout: float | None = None,  # noqa: ASYNC109 (the sync client's words)
                   status: str | Iterable[str] | None = None,
                   poll_interval: float = 1.0) -> Run:
        """The run once it has ended (or, with ``status``, once it has one of those
        statuses or has ended); :class:`WaitTimeout` after ``timeout`` seconds. Reads the
        run, at first often, then every ``poll_interval`` seconds: no event stream is held
        (a tenant's streams are capped)."""
        return await poll_async(lambda: self.get(run_id),
                                Waiting(run_id, timeout, status, poll_interval))


class Agents(AsyncResource):
    async def create(self, name: str, *, model: str, system_prompt: str,
                     tools: Iterable[str] = (), needs_approval: Iterable[str] = (),
                     fallback_models: Iterable[str] = (), limits: Mapping[str, int] | None = None,
                     egress: Iterable[str] | None = None,
                     children: Iterable[Mapping[str, Any]] | None = None,
                     summarize: Mapping[str, Any] | None = None) -> Agent:
        """A new agent at version 1. ``limits``: ``max_steps``, ``max_tokens``,
        ``max_cost_micros`` (the platform's defaults for those left out); ``egress``: the
        hosts its sandboxes may reach; ``children``: ``[{"agent_id", "version"?}]``, agents
        its runs may start as child runs; ``summarize``: ``{"after_tokens",
        "keep_last_steps"?, "model"?}``. Not retried once sent (a retry could make two)."""
        return await self._t.call(_calls.create_agent(
            name, model=model, system_prompt=system_prompt, tools=tools,
            needs_approval=needs_approval, fallback_models=fallback_models, limits=limits,
            egress=egress, children=children, summarize=summarize))

    async def create_version(self, agent_id: str, *, model: str, system_prompt: str,
                             tools: Iterable[str] = (), needs_approval: Iterable[str] = (),
                             fallback_models: Iterable[str] = (),
                             limits: Mapping[str, int] | None = None,
                             egress: Iterable[str] | None = None,
                             children: Iterable[Mapping[str, Any]] | None = None,
                             summarize: Mapping[str, Any] | None = None,
                             version: int | None = None) -> Agent:
        """A new immutable version (the next number; with ``version``, exactly that one or
        Conflict)."""
        return await self._t.call(_calls.create_version(
            agent_id, number=version, model=model, system_prompt=system_prompt, tools=tools,
            needs_approval=needs_approval, fallback_models=fallback_models, limits=limits,
            egress=egress, children=children, summarize=summarize))

    async def get(self, agent_id: str) -> Agent:
        """The agent at its latest version."""
        return await self._t.call(_calls.get_agent(agent_id))

    async def promote(self, agent_id: str, version: int, *,
                      evaluation_id: str | None = None) -> Promotion:
        """Make ``version`` the live one (what a run without a version runs); with
        ``evaluation_id``, only if that evaluation of this version passed every case
        (Conflict otherwise)."""
        return await self._t.call(_calls.promote(agent_id, version, evaluation_id))

    async def get_version(self, agent_id: str, version: int) -> Agent:
        return await self._t.call(_calls.get_version(agent_id, version))

    async def list(self, *, limit: int | None = None,
                   cursor: str | None = None) -> Page[AgentSummary]:
        return await self._t.call(_calls.list_agents(limit=limit, cursor=cursor))


class Approvals(AsyncResource):
    async def list(self, *, status: str | None = None, limit: int | None = None,
                   cursor: str | None = None) -> Page[Approval]:
        """One page of the tenant's approvals, newest first; ``status``: pending,
        approved, denied, expired or cancelled."""
        return await self._t.call(_calls.list_approvals(status=status, limit=limit,
                                                         cursor=cursor))

    async def get(self, approval_id: str) -> Approval:
        return await self._t.call(_calls.get_approval(approval_id))

    async def decide(self, approval_id: str, decision: Literal["approve", "deny"], *,
                     comment: str | None = None) -> Approval:
        """Approve or deny the call; ``comment`` is shown to the model on a denial.
        Deciding twice, or after the run ended, raises Conflict. Not retried once sent."""
        return await self._t.call(_calls.decide(approval_id, decision, comment))

    async def approve(self, approval_id: str, *, comment: str | None = None) -> Approval:
        return await self.decide(approval_id, "approve", comment=comment)

    async def deny(self, approval_id: str, *, comment: str | None = None) -> Approval:
        return await self.decide(approval_id, "deny", comment=comment)


class Evaluations(AsyncResource):
    """An agent's test sets and evaluations of a candidate against a baseline (ADR 0034):
    the platform runs every case on both sides and checks them mechanically."""

    async def create_test_set(self, agent_id: str, name: str,
                        cases: Iterable[Mapping[str, Any]], *,
                        tool_results: Literal["recorded", "live"] = "recorded",
                        stubs: Mapping[str, str] | None = None) -> TestSet:
        """A test set of the agent. Each case: ``{"input", "name"?, "checks"?,
        "recorded"?, "from_run"?}`` (docs/reference/api.md). ``tool_results``:
        ``recorded`` (no call reaches a tool server) or ``live`` (calls to servers that
        honour idempotency keys are made); ``stubs``: tool → the result its calls get when
        no recording matches. Not retried once sent."""
        return await self._t.call(_calls.create_test_set(
            agent_id, name, cases, tool_results=tool_results, stubs=stubs))

    async def get_test_set(self, agent_id: str, test_set_id: str) -> TestSet:
        return await self._t.call(_calls.get_test_set(agent_id, test_set_id))

    async def list_test_sets(self, agent_id: str, *, limit: int | None = None,
                       cursor: str | None = None) -> Page[TestSetSummary]:
        """One page of the agent's test sets, newest first: each one's name, tool results
        and number of cases (``get_test_set`` reads its cases)."""
        return await self._t.call(_calls.list_test_sets(agent_id, limit=limit, cursor=cursor))

    async def start(self, agent_id: str, test_set_id: str, *,
              candidate_version: int | None = None, candidate_model: str | None = None,
              baseline_version: int | None = None) -> Evaluation:
        """Run every case of the test set on the baseline (default: the live version) and
        the candidate (``candidate_version``, default the baseline's, with
        ``candidate_model`` in place of its model if given; one of the two is needed).
        Returns the evaluation as it starts (``status`` ``running``). Not retried once
        sent (a retry would start a second evaluation)."""
        return await self._t.call(_calls.start_evaluation(
            agent_id, test_set_id, candidate_version=candidate_version,
            candidate_model=candidate_model, baseline_version=baseline_version))

    async def get(self, agent_id: str, evaluation_id: str) -> Evaluation:
        """The evaluation's report as its runs stand now."""
        return await self._t.call(_calls.get_evaluation(agent_id, evaluation_id))

    async def list(self, agent_id: str, *, limit: int | None = None,
             cursor: str | None = None) -> Page[EvaluationSummary]:
        """One page of the agent's evaluations, newest first."""
        return await self._t.call(_calls.list_evaluations(agent_id, limit=limit, cursor=cursor))

    async def wait(self, agent_id: str, evaluation_id: str, *,
             timeout: float | None = None,  # noqa: ASYNC109 (the sync client's words)
             poll_interval: float = 1.0) -> Evaluation:
        """The evaluation once every run of it has ended (``status`` ``finished``);
        :class:`WaitTimeout` after ``timeout`` seconds (its ``run`` is the evaluation as
        last read). Reads it, at first often, then every ``poll_interval`` seconds."""
        return await poll_async(lambda: self.get(agent_id, evaluation_id),
                                EvaluationWaiting(evaluation_id, timeout, poll_interval))


class Secrets(AsyncResource):
    """The tenant's vault: secrets its tool servers send as their bearer token (or an OAuth
    client's secret). Write-only: a value is stored, replaced or deleted, never read back."""

    async def put(self, name: str, value: str) -> Secret:
        """Store the secret ``name`` (or replace its value), encrypted with the tenant's
        key. Servers that send it use the new value within a minute."""
        return await self._t.call(_calls.put_secret(name, value))

    async def list(self, *, limit: int | None = None,
                   cursor: str | None = None) -> Page[Secret]:
        """One page of the tenant's secrets (names and dates), ordered by name."""
        return await self._t.call(_calls.list_secrets(limit=limit, cursor=cursor))

    async def get(self, name: str) -> Secret:
        """The secret's name and dates (to check it is there): NotFound if it is not."""
        return await self._t.call(_calls.get_secret(name))

    async def delete(self, name: str) -> None:
        """Delete the secret. Conflict while a tool server of the tenant still sends it
        (remove that server first). Not retried once sent."""
        await self._t.call(_calls.delete_secret(name))


class ToolServers(AsyncResource):
    """The tenant's MCP tool servers: registered, pinned, connected and removed with its
    own key, within the addresses the operator allows
    (docs/how-to/tools-and-approvals.md)."""

    async def register(self, name: str, url: str, *, honours_idempotency_keys: bool,
                       secret: str | None = None, oauth: Mapping[str, Any] | None = None,
                       call_timeout_seconds: int | None = None) -> ToolServer:
        """Register the MCP server at ``url`` (streamable HTTP): its tool list is read now
        and pinned. ``honours_idempotency_keys``: the server performs a call once per
        Idempotency-Key (calls to one that does not are never retried after an ambiguous
        failure); ``secret``: the name of a vault secret sent as its bearer token;
        ``oauth``: ``{"grant"?, "client_id"?, "client_secret"?}`` for a client issued
        beforehand (``client_secret`` names a vault secret) — a server that answers 401
        with a Bearer challenge is registered waiting to be connected without it;
        ``call_timeout_seconds``: one call's deadline (1 to 3600; the platform's default,
        30, without it). A URL the operator's rules refuse (not an allowed pattern, or a
        loopback, private, link-local or metadata address, or not https) raises
        :class:`ToolServerUrlRefused`. Not retried once sent."""
        return await self._t.call(_calls.register_tool_server(
            name, url, honours_idempotency_keys=honours_idempotency_keys, secret=secret,
            oauth=oauth, call_timeout_seconds=call_timeout_seconds))

    async def list(self, *, limit: int | None = None,
                   cursor: str | None = None) -> Page[ToolServer]:
        """One page of the tenant's tool servers, ordered by name (the operator's too)."""
        return await self._t.call(_calls.list_tool_servers(limit=limit, cursor=cursor))

    async def get(self, name: str) -> ToolServer:
        return await self._t.call(_calls.get_tool_server(name))

    async def pin(self, name: str) -> ToolServer:
        """Accept the server's current tool list as reviewed (after it changed); agent
        versions published from then on pin it."""
        return await self._t.call(_calls.pin_tool_server(name))

    async def connect(self, name: str) -> ToolServerConnection:
        """Start (or renew) an OAuth server's authorization: open ``authorization_url`` in
        the browser of whoever may grant access; once they have, the server is connected
        and its tool list pinned. None for a client credentials server: connected at
        once. Conflict for a server that does not authorize with OAuth. Not retried once
        sent."""
        return await self._t.call(_calls.connect_tool_server(name))

    async def remove(self, name: str) -> None:
        """Remove the server: its tools are offered to no run from then on. Not retried
        once sent."""
        await self._t.call(_calls.remove_tool_server(name))
