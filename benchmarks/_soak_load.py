"""The soak benchmark's tenants and its mixed load, all through the real HTTP API (soak.py).

Each run carries its own script for the fake model (``{"script": [...], "input": ...}``) and
is one of these kinds (weights in :data:`KINDS`):

* ``tools``: a keyed ``effect`` and an ``echo`` (sometimes also ``fail``, a tool error the
  model is told about), then an answer;
* ``chat``: one model step, an answer;
* ``slow``: a ``slow`` tool call of 2-5 s, then an answer;
* ``approval``: ``effect`` needs approval — the run waits, and the approver (this script,
  through ``/v1/approvals``) approves (70%), denies (20%) or cancels the waiting run (10%)
  after 1-8 s;
* ``cancel``: a long run (``slow`` 8 s, then more) cancelled 0.2-6 s after it was created —
  queued, in a model call, or in the tool call;
* ``sandbox``: ``write_file`` + ``run_python``, then ``read_file``, then an answer (in the
  run's sandbox, on whatever backend the platform probed).

Every model step waits 100-1500 ms at the fake provider. Independently, 30% of runs carry a
``webhook`` (the receiver here verifies every signature and answers 503 to the first
delivery of one run in ten, so retries happen too) and 20% are watched over their SSE event
stream (gaps in the seq are counted). Creation is paced (exponential gaps) and bounded: at
most ``in_flight`` runs not yet seen terminal at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import random
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import httpx2
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from _harness import scripted_input, wait_for

KINDS = {"tools": 35, "chat": 10, "slow": 10, "approval": 20, "cancel": 15, "sandbox": 5}
TERMINAL = frozenset({"finished", "failed", "cancelled"})
REQUEST_TIMEOUT_S = 30.0
POLL_EVERY_S = (2.0, 4.0)
APPROVER_EVERY_S = 1.0


# -- tenants ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Tenant:
    name: str
    tenant_id: str
    api_key: str
    webhook_secret: str
    agents: dict[str, str]  # "tools" | "approval" | "coder" -> agent id


def _expect(response: httpx2.Response, *statuses: int) -> dict[str, Any]:
    if response.status_code not in statuses:
        raise RuntimeError(f"{response.request.method} {response.request.url} -> "
                           f"{response.status_code}: {response.text[:500]}")
    body: dict[str, Any] = response.json()
    return body


async def provision(
    http: httpx2.AsyncClient, operator_token: str, mcp_url: str, names: list[str],
) -> list[Tenant]:
    """Tenants as an operator makes them: key, the MCP server, agents; the last tenant is
    capped at 6 running runs so the scheduler's caps are in the mix."""
    admin = {"Authorization": f"Bearer {operator_token}"}
    made = []
    for index, name in enumerate(names):
        tenant = _expect(await http.post("/admin/v1/tenants", headers=admin,
                                         json={"name": name, "tenant_id": name}), 201)
        tid = tenant["tenant_id"]
        key = _expect(await http.post(f"/admin/v1/tenants/{tid}/api-keys", headers=admin,
                                      json={"name": "soak"}), 201)["api_key"]
        _expect(await http.post(f"/admin/v1/tenants/{tid}/tool-servers", headers=admin,
                                json={"name": "effects", "url": mcp_url,
                                      "honours_idempotency_keys": True}), 201)
        if index == len(names) - 1:
            _expect(await http.put(f"/admin/v1/tenants/{tid}/policy", headers=admin,
                                   json={"max_running": 6}), 200)
        auth = {"Authorization": f"Bearer {key}"}
        specs = {
            "tools": {"tools": ["effect", "echo", "slow", "fail"]},
            "approval": {"tools": ["effect", "echo"], "needs_approval": ["effect"]},
            "coder": {"tools": ["write_file", "run_python", "read_file"]},
        }
        agents = {}
        for role, spec in specs.items():
            body = {"name": f"soak-{role}", "model": "scripted",
                    "system_prompt": "Do what the script says.", **spec}
            agents[role] = _expect(await http.post("/v1/agents", headers=auth, json=body),
                                   201)["agent_id"]
        made.append(Tenant(name, tid, key, tenant["webhook_secret"], agents))
    return made


# -- what each run does -------------------------------------------------------------------


@dataclass(slots=True)
class Run:
    index: int
    kind: str
    tenant: Tenant
    script: list[dict[str, Any]]
    webhook: bool
    watch: bool
    decision: str | None = None  # approval runs: approve | deny | cancel
    decide_after_s: float = 0.0
    cancel_after_s: float | None = None
    run_id: str | None = None
    status: str | None = None
    error: dict[str, Any] | None = None
    ended_seen: bool = False

    @property
    def agent_id(self) -> str:
        role = {"approval": "approval", "sandbox": "coder"}.get(self.kind, "tools")
        return self.tenant.agents[role]


def _delay(rng: random.Random) -> int:
    return rng.randint(100, 1500)


def plan_run(index: int, tenant: Tenant, rng: random.Random) -> Run:
    kind = rng.choices(list(KINDS), weights=list(KINDS.values()))[0]
    steps: list[dict[str, Any]]
    run = Run(index, kind, tenant, [], webhook=rng.random() < 0.3, watch=rng.random() < 0.2)
    if kind == "tools":
        calls: list[dict[str, Any]] = [{"name": "effect", "arguments": {"note": "{input}"}},
                                       {"name": "echo", "arguments": {"text": "{input}"}}]
        if rng.random() < 0.2:
            calls.append({"name": "fail", "arguments": {"message": "expected failure"}})
        steps = [{"tool_calls": calls, "delay_ms": _delay(rng)},
                 {"text": "done: {tool_results}", "delay_ms": _delay(rng)}]
    elif kind == "chat":
        steps = [{"text": "hello {input}", "delay_ms": _delay(rng)}]
    elif kind == "slow":
        seconds = round(rng.uniform(2, 5), 1)
        steps = [{"tool_calls": [{"name": "slow", "arguments": {"seconds": seconds}}],
                  "delay_ms": _delay(rng)},
                 {"text": "done: {last_tool_result}", "delay_ms": _delay(rng)}]
    elif kind == "approval":
        steps = [{"tool_calls": [{"name": "effect", "arguments": {"note": "{input}"}}],
                  "delay_ms": _delay(rng)},
                 {"text": "done: {last_tool_result}", "delay_ms": _delay(rng)}]
        run.decision = rng.choices(["approve", "deny", "cancel"], weights=[70, 20, 10])[0]
        run.decide_after_s = rng.uniform(1, 8)
    elif kind == "cancel":
        steps = [{"tool_calls": [{"name": "slow", "arguments": {"seconds": 8}}],
                  "delay_ms": _delay(rng)},
                 {"tool_calls": [{"name": "effect", "arguments": {"note": "{input}"}}],
                  "delay_ms": _delay(rng)},
                 {"text": "not cancelled in time", "delay_ms": _delay(rng)}]
        run.cancel_after_s = rng.uniform(0.2, 6)
    else:  # sandbox
        code = "print(open('note.txt').read()[::-1])"
        steps = [{"tool_calls": [
                     {"name": "write_file", "arguments": {"path": "note.txt",
                                                          "content": "{input}"}},
                     {"name": "run_python", "arguments": {"code": code}}],
                  "delay_ms": _delay(rng)},
                 {"tool_calls": [{"name": "read_file", "arguments": {"path": "note.txt"}}],
                  "delay_ms": _delay(rng)},
                 {"text": "done: {tool_results}", "delay_ms": _delay(rng)}]
    run.script = steps
    return run


# -- the webhook receiver -----------------------------------------------------------------


@dataclass(slots=True)
class Webhooks:
    """Deliveries as a tenant's endpoint sees them."""

    secrets: dict[str, str]  # tenant name -> webhook secret
    delivered: Counter[str] = field(default_factory=Counter)  # run id -> 2xx answers
    refused: Counter[str] = field(default_factory=Counter)  # run id -> 503s we answered
    bad_signatures: int = 0

    def app(self) -> Starlette:
        return Starlette(routes=[Route("/hook/{tenant}", self._receive, methods=["POST"])])

    async def _receive(self, request: Request) -> Response:
        body = await request.body()
        secret = self.secrets.get(request.path_params["tenant"], "")
        stamp, _, mac = request.headers.get("tenantry-signature", "").partition(",v1=")
        expected = hmac.new(secret.encode(), f"{stamp.removeprefix('t=')}.".encode() + body,
                            hashlib.sha256).hexdigest()
        if not secret or not hmac.compare_digest(mac, expected):
            self.bad_signatures += 1
            return Response(status_code=400)
        run_id = request.headers.get("idempotency-key", "")
        # One run in ten has its first delivery refused: the worker's retry path runs too.
        if (not self.refused[run_id] and not self.delivered[run_id]
                and int(hashlib.sha256(run_id.encode()).hexdigest(), 16) % 10 == 0):
            self.refused[run_id] += 1
            return Response(status_code=503)
        self.delivered[run_id] += 1
        return Response(status_code=204)


# -- the load -----------------------------------------------------------------------------


@dataclass(slots=True)
class Counts:
    created: int = 0
    refused: Counter[str] = field(default_factory=Counter)  # status code -> count
    create_retries: int = 0
    cancels: Counter[str] = field(default_factory=Counter)  # "200" / "409"
    decisions: Counter[str] = field(default_factory=Counter)
    decision_conflicts: int = 0
    poll_errors: int = 0
    streams: int = 0
    stream_errors: int = 0
    stream_gaps: int = 0


class Load:
    """Creates runs at ``rate`` per second (at most ``in_flight`` unfinished) until told to
    stop, drives their approvals and cancels, and follows each until it ends."""

    def __init__(self, base_url: str, tenants: list[Tenant], webhook_base: str, *,
                 rate: float, in_flight: int, seed: int) -> None:
        self.tenants = tenants
        self.webhook_base = webhook_base
        self.rate = rate
        self.rng = random.Random(seed)
        self.runs: list[Run] = []
        self.by_id: dict[str, Run] = {}
        self.counts = Counts()
        self.draining = False
        self._slots = asyncio.Semaphore(in_flight)
        self._tasks: set[asyncio.Task[None]] = set()
        self._clients = {t.name: httpx2.AsyncClient(
            base_url=base_url, timeout=REQUEST_TIMEOUT_S, trust_env=False,
            limits=httpx2.Limits(max_connections=200, max_keepalive_connections=20),
            headers={"Authorization": f"Bearer {t.api_key}"}) for t in tenants}

    async def aclose(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for client in self._clients.values():
            await client.aclose()

    @property
    def unfinished(self) -> list[Run]:
        return [r for r in self.runs if r.run_id is not None and not r.ended_seen]

    def _spawn(self, work: Any) -> None:
        task = asyncio.create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # -- creating -------------------------------------------------------------------------

    async def generate(self, stop: asyncio.Event) -> None:
        """Arrivals until ``stop`` is set."""
        index = 0
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), self.rng.expovariate(self.rate))
                return
            await self._slots.acquire()
            if stop.is_set():
                self._slots.release()
                return
            run = plan_run(index, self.tenants[index % len(self.tenants)], self.rng)
            index += 1
            self._spawn(self._life(run))

    async def _life(self, run: Run) -> None:
        try:
            if not await self._create(run):
                return
            if run.watch:
                self._spawn(self._watch(run))
            if run.cancel_after_s is not None:
                await asyncio.sleep(run.cancel_after_s)
                await self.cancel(run)
            await self._follow(run)
        finally:
            self._slots.release()

    async def _create(self, run: Run) -> bool:
        client = self._clients[run.tenant.name]
        body: dict[str, Any] = {"agent_id": run.agent_id,
                                "input": scripted_input(run.script, f"{run.kind}-{run.index}")}
        if run.webhook:
            body["webhook"] = f"{self.webhook_base}/hook/{run.tenant.name}"
        headers = {"Idempotency-Key": f"soak-{uuid.uuid4().hex}"}
        for attempt in range(3):
            try:
                response = await client.post("/v1/runs", json=body, headers=headers)
            except httpx2.TransportError:
                # Same key again: if the first one was created we get the same run back.
                self.counts.create_retries += 1
                await asyncio.sleep(1 + attempt)
                continue
            if response.status_code != 202:
                self.counts.refused[str(response.status_code)] += 1
                return False
            run.run_id = response.json()["run_id"]
            self.runs.append(run)
            self.by_id[run.run_id] = run
            self.counts.created += 1
            return True
        self.counts.refused["transport"] += 1
        return False

    # -- driving --------------------------------------------------------------------------

    async def cancel(self, run: Run) -> None:
        client = self._clients[run.tenant.name]
        with contextlib.suppress(httpx2.TransportError):
            response = await client.post(f"/v1/runs/{run.run_id}/cancel")
            self.counts.cancels[str(response.status_code)] += 1

    async def refresh(self, run: Run) -> None:
        """The run as the API shows it now."""
        client = self._clients[run.tenant.name]
        try:
            response = await client.get(f"/v1/runs/{run.run_id}")
        except httpx2.TransportError:
            self.counts.poll_errors += 1
            return
        if response.status_code == 404:
            run.status = "missing"
            return
        if response.status_code != 200:
            self.counts.poll_errors += 1
            return
        body = response.json()
        run.status, run.error = body["status"], body["error"]
        if run.status in TERMINAL:
            run.ended_seen = True

    async def _follow(self, run: Run) -> None:
        while True:
            await self.refresh(run)
            if run.ended_seen:
                return
            await asyncio.sleep(self.rng.uniform(*POLL_EVERY_S))

    async def approver(self, tenant: Tenant, stop: asyncio.Event) -> None:
        """The tenant's person deciding approvals: each after its planned delay (at once,
        and always ``approve``, once the soak is draining)."""
        client = self._clients[tenant.name]
        first_seen: dict[str, float] = {}
        handled: set[str] = set()
        while not stop.is_set():
            try:
                response = await client.get("/v1/approvals",
                                            params={"status": "pending", "limit": 200})
                pending = response.json()["data"] if response.status_code == 200 else []
            except httpx2.TransportError:
                pending = []
            now = time.monotonic()
            for approval in pending:
                approval_id = approval["approval_id"]
                if approval_id in handled:
                    continue
                run = self.by_id.get(approval["run_id"])
                seen = first_seen.setdefault(approval_id, now)
                wait = run.decide_after_s if run is not None else 0.0
                if not self.draining and now - seen < wait:
                    continue
                handled.add(approval_id)
                decision = run.decision if run is not None else "approve"
                if self.draining or decision is None:
                    decision = "approve"
                if decision == "cancel" and run is not None:
                    await self.cancel(run)
                    continue
                await self._decide(client, approval_id, decision)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), APPROVER_EVERY_S)

    async def _decide(self, client: httpx2.AsyncClient, approval_id: str, decision: str) -> None:
        try:
            response = await client.post(f"/v1/approvals/{approval_id}",
                                         json={"decision": decision})
        except httpx2.TransportError:
            return
        if response.status_code == 200:
            self.counts.decisions[decision] += 1
        elif response.status_code == 409:  # the run ended first (cancelled while waiting)
            self.counts.decision_conflicts += 1

    async def _watch(self, run: Run) -> None:
        """Follow the run's SSE stream to its end; reconnect after the last seq seen."""
        client = self._clients[run.tenant.name]
        self.counts.streams += 1
        last = 0
        for _ in range(20):
            try:
                async with client.stream(
                    "GET", f"/v1/runs/{run.run_id}/events", params={"after": last},
                    headers={"Accept": "text/event-stream"},
                    timeout=httpx2.Timeout(REQUEST_TIMEOUT_S, read=60.0),
                ) as response:
                    if response.status_code != 200:
                        self.counts.stream_errors += 1
                        return
                    async for line in response.aiter_lines():
                        if line.startswith("id: "):
                            seq = int(line[4:])
                            if seq != last + 1:
                                self.counts.stream_gaps += 1
                            last = seq
                return  # the server closed it: the run ended
            except httpx2.HTTPError:
                self.counts.stream_errors += 1
                await asyncio.sleep(1.0)

    # -- draining -------------------------------------------------------------------------

    async def wait_all(self, within: float) -> bool:
        """Until every created run was seen ended (their follow tasks return), or not."""
        try:
            await wait_for(lambda: not self.unfinished, within=within,
                           what="every run to end", every=1.0)
        except RuntimeError:
            return False
        return True

    async def verify(self) -> None:
        """Read every created run once more (its final status and error)."""
        gate = asyncio.Semaphore(8)

        async def one(run: Run) -> None:
            async with gate:
                await self.refresh(run)

        await asyncio.gather(*(one(r) for r in self.runs))

    async def sandbox_backends(self) -> Counter[str]:
        """Which sandbox backend each code tool call ran on, from the runs' event logs
        (``none``: the call got an error instead, e.g. no sandbox backend)."""
        found: Counter[str] = Counter()
        for run in self.runs:
            if run.kind != "sandbox" or run.status != "finished":
                continue
            client = self._clients[run.tenant.name]
            response = await client.get(f"/v1/runs/{run.run_id}/events",
                                        headers={"Accept": "application/json"},
                                        params={"limit": 1000})
            for event in response.json()["events"]:
                if event["type"] == "ToolCompleted":
                    box = event["data"].get("sandbox")
                    found[box["backend"] if box else "none"] += 1
        return found
