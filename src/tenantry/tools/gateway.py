"""The one place every tool call of every run goes through, in order:

allow-list (the pinned agent version) → approval (bound to the call's key and arguments)
→ built-in tools (code, files) go to the run's own sandbox; tenants' tools go on through
credential (from the vault, for this one request's header only) → pin (the tool list the
agent version was published against, compared with the list of the very session the call
goes out on) → circuit breaker → idempotency key (``_meta`` and header) →
call within its server's deadline (``call_timeout_seconds``). Every output is capped at
8 KiB (the rest to the blob store by reference); the driver writes the audit row with the
call's ToolCompleted.

Every refusal and failure becomes a result the model reads; none crashes the run."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from tenantry.agents import activity_tools, child_tools
from tenantry.agents.spec import AgentSpec
from tenantry.backoff import backoff
from tenantry.blobs import BlobKind, BlobQuotaExceeded, BlobStore
from tenantry.breaker import CircuitBreaker
from tenantry.cache import BoundedCache
from tenantry.db import Database
from tenantry.errors import NotFound, ToolUnavailable
from tenantry.ids import RunId, TenantId
from tenantry.sandbox.egress import EgressRefusal
from tenantry.tools import approvals, stand_ins
from tenantry.tools.audit import AuditEntry
from tenantry.tools.builtin import NAMES as BUILTIN_TOOLS
from tenantry.tools.builtin import BuiltinTools, Retry, retry_of, uses_browser
from tenantry.tools.mcp_client import McpToolClient, ToolOutcome
from tenantry.tools.oauth.connections import AuthorizationRequired, ToolServerAuth
from tenantry.tools.oauth.discovery import AuthorizationFailed, parse_challenge
from tenantry.tools.servers import ToolServer, list_servers, tools_digest
from tenantry.tools.stand_ins import StandIn
from tenantry.vault import SealedSecret, Vault, VaultError

#: Tool output kept in the log and shown to the model (invariant 10).
OUTPUT_CAP_BYTES = 8192
#: How long a server's sealed credential may be reused from memory (a rotated secret takes
#: effect within this time). Only the sealed form is kept: it is opened for each call, and
#: its value lives no longer than that call's request.
CREDENTIAL_TTL_SECONDS = 60.0
#: Entries each per-tenant cache of a gateway keeps at most (least recently used go first):
#: one per tenant, or per tenant and server, of those a worker serves at once.
CACHE_ENTRIES = 10_000
#: A breaker is forgotten this long after its server was last looked up by a call: an open
#: one has long cooled down by then.
BREAKER_TTL_SECONDS = 900.0
#: Retries for a server that could not be reached, with the same key each time, within the
#: call's one deadline (its server's ``call_timeout_seconds``): one that hung through it is
#: not waited on again.
UNAVAILABLE_RETRIES = 2
#: Their waits: doubling from this, with jitter (tenantry/backoff.py), at most the second.
RETRY_FIRST_SECONDS = 0.2
RETRY_MAX_SECONDS = 0.8


@dataclass(frozen=True, slots=True)
class ToolResult:
    """What goes into ToolCompleted (runs/tool_step.py): ``result`` or ``error``, never
    both."""

    result: str | None
    error: str | None
    server: str | None
    duration_ms: float
    output_bytes: int = 0
    truncated: bool = False
    output_ref: str | None = None
    outcome: str = "ok"
    sandbox: dict[str, Any] | None = None  # built-in tools: which sandbox, and its times
    # Built-in tools: egress attempts the sandbox had refused during the call, and how many
    # more were refused than kept (runs/tool_step.py records them as EgressRefused).
    egress_refused: tuple[EgressRefusal, ...] = ()
    egress_dropped: int = 0
    blob_refs: tuple[str, ...] = ()  # built-in tools: blobs stored besides the output
    # A call not made because its OAuth server needs the tenant to connect it again: the
    # server's id (the run waits for it, runs/waiting.py); ``error`` says why.
    waits_for: uuid.UUID | None = None

    def audit(self, tool: str, key: str, arguments: dict[str, Any] | None) -> AuditEntry:
        return AuditEntry.of(tool, key, arguments, self.outcome, server=self.server,
                             detail=self.error, duration_ms=self.duration_ms)


class ToolGateway:
    def __init__(
        self, db: Database, mcp: McpToolClient, *, vault: Vault | None = None,
        blobs: BlobStore | None = None, directory_ttl: float = 5.0,
        pin_check_seconds: float = 60.0, breaker_threshold: int = 5,
        breaker_reset_seconds: float = 30.0, builtins: BuiltinTools | None = None,
    ) -> None:
        self._db = db
        # Code execution and files: always known by name, served only where a sandbox
        # backend is configured (otherwise the model is told it is unavailable).
        self._builtins = builtins or BuiltinTools(None)
        self._mcp = mcp
        self._vault = vault
        self._blobs = blobs
        self._pin_every = pin_check_seconds
        self._breaker_args = (breaker_threshold, breaker_reset_seconds)
        self._directory: BoundedCache[str, dict[str, ToolServer]] = BoundedCache(
            max_entries=CACHE_ENTRIES, ttl_seconds=directory_ttl)
        self._breakers: BoundedCache[tuple[str, uuid.UUID], CircuitBreaker] = BoundedCache(
            max_entries=CACHE_ENTRIES, ttl_seconds=BREAKER_TTL_SECONDS)
        self._pins_checked: BoundedCache[tuple[str, uuid.UUID, bytes], bool] = BoundedCache(
            max_entries=CACHE_ENTRIES, ttl_seconds=pin_check_seconds)
        self._credentials: BoundedCache[tuple[str, str], SealedSecret] = BoundedCache(
            max_entries=CACHE_ENTRIES, ttl_seconds=CREDENTIAL_TTL_SECONDS)
        self._auth = ToolServerAuth(db, vault, mcp.destinations)  # OAuth servers' tokens

    # -- what the model may see --------------------------------------------------------

    async def definitions(self, tenant: TenantId, spec: AgentSpec) -> list[dict[str, Any]]:
        """The allowed tools, in the OpenAI ``tools`` shape, in the version's order."""
        directory = await self._servers(tenant)
        definitions = []
        for name in spec.tools:
            if name in BUILTIN_TOOLS:
                definitions.append(self._builtins.definition(name))
                continue
            activity = activity_tools.parse(name)
            if activity is not None:  # called by the run itself (runs/activity_step.py)
                definitions.append(activity.definition())
                continue
            server = directory.get(name)
            if server is None:
                continue
            tool = next(t for t in server.tools if t["name"] == name)
            definitions.append({"type": "function", "function": {
                "name": name, "description": tool["description"],
                "parameters": tool["input_schema"]}})
        if spec.children:  # started by the run itself (runs/child_step.py)
            definitions.append(child_tools.definition(spec.children))
        return definitions

    async def retry(self, tenant: TenantId, spec: AgentSpec, tool: str) -> Retry:
        """What a crash that cuts this call short makes of it (:class:`Retry`): the tool
        step announces any but ``KEYED`` with a ToolStarted before the call."""
        if tool in BUILTIN_TOOLS:
            return retry_of(tool, spec.sandbox)
        if activity_tools.is_activity_entry(tool):
            return Retry.KEYED  # the run enqueues a task under the call's key
        server = (await self._servers(tenant)).get(tool)
        if server is None or server.honours_idempotency_keys:
            return Retry.KEYED  # refused before anything is sent, or deduped by the key
        return Retry.UNKNOWN

    def breaker_states(self) -> dict[str, str]:
        return {f"{t}/{s}": b.state for (t, s), b in self._breakers.items()}

    def cache_sizes(self) -> dict[str, int]:
        """Entries each per-tenant cache holds now (each bounded by ``CACHE_ENTRIES``)."""
        return {"directory": len(self._directory), "breakers": len(self._breakers),
                "pins_checked": len(self._pins_checked), "credentials": len(self._credentials)}

    # -- the call ----------------------------------------------------------------------

    async def call(
        self, tenant: TenantId, spec: AgentSpec, tool: str, arguments: dict[str, Any],
        key: str, *, run: RunId, sandbox_ref: str | None = None,
        pins: Mapping[str, Mapping[str, str]] | None = None, stand_in: StandIn | None = None,
        fresh_sandbox: bool = False,
    ) -> ToolResult:
        """``pins`` are the version's ``tool_pins`` (tool → {server, sha256}): a pinned
        tool is called only while its server serves exactly the list pinned at publishing.
        ``stand_in``: the run is an evaluation's; its calls — to tenants' tools and to
        built-in ones — are answered as its test set says (``tools/stand_ins.py``), after
        the same checks. ``fresh_sandbox``: a built-in call whose earlier attempt was cut
        short (``Retry.FRESH_SANDBOX``) runs on a sandbox restored from ``sandbox_ref``."""
        started = time.perf_counter()
        server: ToolServer | None = None

        async def refuse(error: str, outcome: str = "refused", *,
                         waits_for: uuid.UUID | None = None) -> ToolResult:
            return ToolResult(None, error, server.name if server else None,
                              (time.perf_counter() - started) * 1000, outcome=outcome,
                              waits_for=waits_for)

        if tool not in spec.tools:
            return await refuse(f"tool {tool!r} is not available to this agent")
        # Defence in depth behind the decision logic: the approval must name this call.
        if tool in spec.needs_approval and not await approvals.is_approved(
                self._db, tenant, key, arguments):
            return await refuse(f"tool {tool!r} needs an approval for exactly this call")
        if activity_tools.is_activity_entry(tool):
            # The run enqueues an activity task and waits for it; it is never a call here.
            return await refuse(f"tool {tool!r} is an activity: the run enqueues it")
        builtin = tool in BUILTIN_TOOLS
        server = None if builtin else (await self._servers(tenant)).get(tool)
        if stand_in is not None:
            answer = stand_in.answer(tool, arguments, may_call=stand_ins.may_call(
                spec, builtin=builtin, server=server))
            if answer is not None:
                shaped = await self._shape(tenant, run, key, None, answer.error is None,
                                           answer.error or answer.result or "", started)
                return dataclasses.replace(shaped, outcome=answer.outcome)
        if builtin:
            return await self._call_builtin(tenant, spec, tool, arguments, key, run,
                                            sandbox_ref, started, fresh_sandbox)
        if server is None:
            return await refuse(f"tool {tool!r} is not served by any registered tool server")
        breaker = self._breaker(tenant, server)
        if not breaker.allow():
            return await refuse(f"tool server {server.name!r} is failing; calls are paused "
                                "for a while (circuit open)", "unavailable")
        try:
            return await self._call_server(tenant, run, tool, arguments, key, server, breaker,
                                           started, refuse, (pins or {}).get(tool))
        finally:
            breaker.release()  # a half-open probe that ended without a verdict frees the slot

    async def _call_server(
        self, tenant: TenantId, run: RunId, tool: str, arguments: dict[str, Any], key: str,
        server: ToolServer, breaker: CircuitBreaker, started: float,
        refuse: Callable[..., Awaitable[ToolResult]], pin: Mapping[str, str] | None,
    ) -> ToolResult:
        deadline = started + server.call_timeout_seconds  # pin check and retries too

        def left() -> float:
            return deadline - time.perf_counter()

        refreshed = False
        while True:  # twice at most for an OAuth server whose token was refused: refreshed
            try:
                headers = await self._credential(tenant, server, refresh=refreshed)
                if pin is not None:
                    await self._check_version_pin(tenant, server, headers, tool, pin, left())
                else:  # a version published before this tool had a server: the operator's
                    await self._check_pin(tenant, server, headers, left())
            except AuthorizationRequired as exc:
                return await refuse(_needs_connecting(server, exc.detail),
                                    waits_for=server.server_id)
            except AuthorizationFailed as exc:  # its authorization server failed: transient
                return await refuse(f"tool server {server.name!r}: {exc.detail}", "unavailable")
            except (VaultError, NotFound) as exc:
                return await refuse(f"no usable credential for {server.name!r}: {exc}")
            except PinMismatch as exc:
                return await refuse(str(exc))
            except ToolUnavailable as exc:
                if server.oauth and exc.extra.get("reason") == "unauthorized":
                    refusal = await self._token_refused(
                        tenant, server, int(exc.extra.get("http_status", 401)),
                        str(exc.extra.get("www_authenticate", "")), refreshed)
                    if refusal is None:
                        refreshed = True
                        continue
                    return await refuse(refusal, waits_for=server.server_id)
                breaker.failed()
                return await refuse(f"tool server unavailable: {exc.detail}", "unavailable")
            outcome = await self._send(tenant, tool, arguments, key, server, breaker, headers,
                                       started, left)
            if isinstance(outcome, ToolResult):
                return outcome
            if server.oauth and outcome.refused is not None:
                refusal = await self._token_refused(tenant, server, *outcome.refused, refreshed)
                if refusal is None:
                    refreshed = True
                    continue
                return await refuse(refusal, waits_for=server.server_id)
            return await self._shape(tenant, run, key, server.name, outcome.ok,
                                     outcome.content or outcome.error or "", started)

    async def _send(
        self, tenant: TenantId, tool: str, arguments: dict[str, Any], key: str,
        server: ToolServer, breaker: CircuitBreaker, headers: dict[str, str],
        started: float, left: Callable[[], float],
    ) -> ToolOutcome | ToolResult:
        """The call, repeated while the server cannot be reached and a repeat is safe; a
        ToolResult when it is given up."""
        for attempt in range(UNAVAILABLE_RETRIES + 1):
            try:
                outcome = await self._mcp.call(server.url, tool, arguments, idempotency_key=key,
                                               headers=headers, tenant=tenant, timeout=left(),
                                               guarded=server.guarded,
                                               modern=server.speaks_modern)
                breaker.succeeded()
                break
            except ToolUnavailable as exc:
                breaker.failed()
                # A call that may have reached the server is repeated only where the server
                # honours keys; one that never connected is safe to repeat anywhere.
                safe = server.honours_idempotency_keys or exc.extra.get("reason") == "connect"
                pause = backoff(attempt + 1, first=RETRY_FIRST_SECONDS, cap=RETRY_MAX_SECONDS)
                if (attempt == UNAVAILABLE_RETRIES or not safe or left() <= pause
                        or not breaker.allow()):
                    return ToolResult(None, f"tool server unavailable: {exc.detail}",
                                      server.name, (time.perf_counter() - started) * 1000,
                                      outcome="unavailable")
                await asyncio.sleep(pause)
        return outcome

    async def _token_refused(self, tenant: TenantId, server: ToolServer, status: int,
                             header: str, refreshed: bool) -> str | None:
        """An OAuth server refused the call's token. None: refresh it and call once more
        (a 401 to a token not yet refreshed); else why the call was not made: a 403 for a
        scope (step-up), or a refreshed token refused again, makes the server wait for
        the tenant to connect it."""
        challenge = parse_challenge(header)
        if status == 403 or challenge.error == "insufficient_scope":
            await self._auth.step_up(tenant, server.server_id, challenge)
            scope = f" (scope {challenge.scope!r})" if challenge.scope else ""
            return _needs_connecting(server, f"it asks for a broader authorization{scope}")
        if not refreshed:
            return None
        reason = "it refuses even a refreshed token"
        await self._auth.lapse(tenant, server.server_id, reason + ": connect again")
        return _needs_connecting(server, reason)

    async def _call_builtin(
        self, tenant: TenantId, spec: AgentSpec, tool: str, arguments: dict[str, Any],
        key: str, run: RunId, sandbox_ref: str | None, started: float, fresh_sandbox: bool,
    ) -> ToolResult:
        outcome = await self._builtins.call(tenant, run, tool, arguments,
                                            egress=spec.sandbox.egress, sandbox_ref=sandbox_ref,
                                            browser=uses_browser(spec.tools), key=key,
                                            fresh_sandbox=fresh_sandbox)
        result = await self._shape(tenant, run, key, None, outcome.ok, outcome.text, started)
        return dataclasses.replace(result, sandbox=outcome.sandbox or None,
                                   egress_refused=outcome.egress_refused,
                                   egress_dropped=outcome.egress_dropped,
                                   blob_refs=outcome.blob_refs)

    # -- steps -------------------------------------------------------------------------

    async def _shape(
        self, tenant: TenantId, run: RunId, key: str, server: str | None, ok: bool, text: str,
        started: float,
    ) -> ToolResult:
        """Cap the output; keep the whole of a larger one in the blob store by reference."""
        encoded = text.encode()
        truncated = len(encoded) > OUTPUT_CAP_BYTES
        # The tool's time ends here: keeping its output is the platform's (a step's
        # platform time, benchmarks/blobs.py), not the tool's.
        elapsed = (time.perf_counter() - started) * 1000
        ref = None
        if truncated:
            if self._blobs is not None:
                # Past the tenant's blob quota the capped output still goes on, with no ref.
                with contextlib.suppress(BlobQuotaExceeded):
                    ref = await self._blobs.put(tenant, run, BlobKind.TOOL_OUTPUT,
                                                key.replace(":", "-"), encoded)
            text = encoded[:OUTPUT_CAP_BYTES].decode(errors="ignore")
        if not ok:
            return ToolResult(None, text or "tool error", server, elapsed, len(encoded),
                              truncated, ref, "error")
        return ToolResult(text, None, server, elapsed, len(encoded), truncated, ref)

    async def _credential(self, tenant: TenantId, server: ToolServer, *,
                          refresh: bool = False) -> dict[str, str]:
        """The server's credential for this one call's request headers: read sealed from
        the vault at most once a minute per worker, opened here for each call. An OAuth
        server's is its access token, refreshed when it is about to expire (``refresh``:
        now, the server having refused it)."""
        if server.oauth:
            return await self._auth.headers(tenant, server.server_id, refresh=refresh)
        if server.secret_ref is None:
            return {}
        if self._vault is None:
            raise VaultError("the vault is not configured (TENANTRY_MASTER_KEY)")
        cache_key = (tenant.value, server.secret_ref)
        sealed = self._credentials.get(cache_key)
        if sealed is None:
            sealed = self._credentials.put(
                cache_key, await self._vault.sealed(tenant, server.secret_ref))
        return {"Authorization": f"Bearer {self._vault.open(sealed)}"}

    async def _check_pin(
        self, tenant: TenantId, server: ToolServer, headers: dict[str, str], limit_s: float,
    ) -> None:
        """Compare the server's live tool list with its pin, at most once a minute."""
        key = (tenant.value, server.server_id, server.tools_sha256)
        if self._pins_checked.get(key):
            return
        live = tools_digest(await self._mcp.list_tools(
            server.url, headers, tenant=tenant, timeout=limit_s, guarded=server.guarded,
            modern=server.speaks_modern))
        if live != server.tools_sha256:
            # Perhaps an operator re-pinned since the directory was cached: look again.
            self._directory.pop(tenant.value)
            fresh = next((s for s in (await self._servers(tenant)).values()
                          if s.server_id == server.server_id), None)
            if fresh is not None and fresh.tools_sha256 == live:
                self._pins_checked.put((tenant.value, server.server_id, live), True)
                return
            raise PinMismatch(
                f"tool server {server.name!r} now serves a different tool list than the one "
                "an operator pinned; calls are refused until it is re-pinned")
        self._pins_checked.put(key, True)

    async def _check_version_pin(
        self, tenant: TenantId, server: ToolServer, headers: dict[str, str], tool: str,
        pin: Mapping[str, str], limit_s: float,
    ) -> None:
        """The list the call's own session sees must be the one pinned when the version was
        published: a server that changed a tool since (a rug pull) is refused even if an
        operator re-pinned it for later versions. The session lists again at its start,
        on ``tools/list_changed``, and at least every ``pin_check_seconds``."""
        if pin.get("server") != server.name:
            raise PinMismatch(
                f"tool {tool!r} is now served by {server.name!r}, not by the server "
                f"{pin.get('server')!r} this agent version was published with; publish a "
                "new version to use it")
        deadline = time.perf_counter() + limit_s
        live = tools_digest(await self._mcp.session_tools(
            server.url, headers, tenant=tenant, max_age=self._pin_every, timeout=limit_s,
            guarded=server.guarded, modern=server.speaks_modern))
        if live != server.tools_sha256:
            # An operator re-pinned the server since this session listed it: what the
            # session remembers is stale, so look again now.
            live = tools_digest(await self._mcp.session_tools(
                server.url, headers, tenant=tenant, max_age=0.0,
                timeout=deadline - time.perf_counter(), guarded=server.guarded,
                modern=server.speaks_modern))
        if live.hex() != pin.get("sha256"):
            raise PinMismatch(
                f"tool server {server.name!r} now serves a different tool list than the one "
                f"this agent version was published against (tool {tool!r} may have changed); "
                "the call was not made: publish a new version after reviewing the server")

    def _breaker(self, tenant: TenantId, server: ToolServer) -> CircuitBreaker:
        key = (tenant.value, server.server_id)
        breaker = self._breakers.get(key)
        if breaker is None:
            breaker = CircuitBreaker(*self._breaker_args)
        return self._breakers.put(key, breaker)  # put again: its expiry counts from now

    async def _servers(self, tenant: TenantId) -> dict[str, ToolServer]:
        """tool name → server, cached briefly: registering a server is rare, calls are not."""
        cached = self._directory.get(tenant.value)
        if cached is not None:
            return cached
        return self._directory.put(tenant.value, {
            name: server for server in await list_servers(self._db, tenant)
            for name in server.tool_names()})


class PinMismatch(Exception):
    pass


def _needs_connecting(server: ToolServer, why: str) -> str:
    return (f"authorization_required: tool server {server.name!r} needs the tenant to connect "
            f"it again ({why}); the call was not made")
