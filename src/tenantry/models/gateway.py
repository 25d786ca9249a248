"""The model gateway: every model call of every run goes through here (ADR 0003).

For one call it climbs a ladder and records every rung it takes:

1. the run's current account, retried with exponential backoff and jitter (honouring the
   provider's ``Retry-After``) — waiting its turn, fairly, while the account is at capacity;
2. the same model on the next account (another provider or region) — ``ModelRerouted``;
3. the agent version's fallback models, in order, only if it opted in —
   ``ModelFallback{from, to, reason}``;
4. nothing left: :class:`ModelsExhausted`, and the engine parks the run (slot released)
   until an account serving its model is found serving again.

A circuit breaker per account stops calls to an endpoint that keeps failing. When it turns
half-open, one call may try the account: a background prober asks the provider
(``GET /models``); if that answers, it closes the breaker and wakes the runs parked on that
account's models. The endpoint is optional — a provider may not have it — so an answer that
tells nothing (404, 403, ...) is not a failure: the prober then wakes a few parked runs
instead, and the first one's real call is the probe (ADR 0009). The gateway never
switches models on its own: a switch happens only down the agent's own fallback list, and
the reply says why it happened so the engine can record it.

An account's rpm/tpm is shared by every worker process of the cell: each gateway holds a
leased share of it in Postgres, renewed in the background (:mod:`tenantry.models.sharing`,
ADR 0021), and its capacity gate runs at that share."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol, Self

from tenantry.backoff import backoff
from tenantry.breaker import CircuitBreaker
from tenantry.db import DATABASE_DOWN, Database
from tenantry.ledger.tokens import estimate_tokens
from tenantry.models import accounts as account_store
from tenantry.models.accounts import ModelAccount
from tenantry.models.capacity import AccountCapacity
from tenantry.models.clients import api_key, http_client
from tenantry.models.errors import (
    AccountUnusable,
    ModelError,
    ModelRefused,
    ModelsExhausted,
    RateLimited,
    probe_tells_nothing,
)
from tenantry.models.route_state import Attempts, Route
from tenantry.models.routing import candidates
from tenantry.models.sharing import CapacityShares, ShareSettings, limited
from tenantry.models.types import ModelReply, ModelRequest, ProviderClient
from tenantry.vault import Vault
from tenantry.vault.crypto import MasterKey

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class GatewaySettings:
    attempts_per_account: int = 3
    backoff_seconds: float = 0.5
    max_backoff_seconds: float = 10.0
    # A Retry-After longer than this moves the call to the next account instead of waiting.
    max_retry_after_seconds: float = 30.0
    call_timeout_seconds: float = 120.0
    breaker_threshold: int = 5
    breaker_reset_seconds: float = 5.0
    # The longest a breaker stays open: with the probe interval, most of how long a parked
    # run may wait after its provider recovered (docs/how-to/model-providers.md).
    breaker_max_reset_seconds: float = 30.0
    refresh_seconds: float = 5.0
    probe_interval_seconds: float = 1.0
    # When the probe tells nothing (no GET /models, or not for this key), a half-open
    # account wakes this many runs parked on its models: their real call is the probe.
    # While none of them takes the half-open slot (another worker claimed them, or they
    # cannot use this account), twice as many are woken each time this much time passes.
    probe_runs: int = 1
    probe_runs_retry_seconds: float = 5.0
    # Bring-your-own-key credentials are re-read from the vault this often (rotations).
    credential_ttl_seconds: float = 300.0
    # How the accounts' rpm/tpm are shared with the cell's other workers (ADR 0021).
    shares: ShareSettings = field(default_factory=ShareSettings)
    # Accounts called without streaming (ADR 0030), by id; "*": every account.
    no_stream: frozenset[str] = frozenset()


ClientFactory = Callable[[ModelAccount, str | None, float], ProviderClient]
# Send runs parked on a model the account serves back to the queue: ``limit`` of them, or
# (None) all; returns how many.
WakeParked = Callable[[ModelAccount, int | None], Awaitable[int]]


class CallObserver(Protocol):
    """Told of every attempt on an account (metrics): outcome is ok, error, rate_limited,
    unusable or refused."""

    def model_call(self, tenant: str, provider: str, account: str, outcome: str) -> None: ...
AccountsLoader = Callable[[], Awaitable[Sequence[ModelAccount]]]


class ModelGateway:
    def __init__(
        self, db: Database | None, *, vault: Vault | None = None,
        master: MasterKey | None = None, settings: GatewaySettings | None = None,
        implicit: Sequence[tuple[ModelAccount, str | None]] = (),
        load_accounts: AccountsLoader | None = None,
        client_factory: ClientFactory = http_client,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        observer: CallObserver | None = None,
        wake_parked: WakeParked | None = None,
        clock: Callable[[], float] = time.monotonic,
        holder: str | None = None,
    ) -> None:
        """``holder``: this gateway's name in the accounts' shares (default: a new one);
        with no database (``db`` None) nothing is shared and each account's limits are this
        process's alone."""
        self._db = db
        self._observer = observer
        self._vault = vault
        self._master = master
        self.settings = settings or GatewaySettings()
        # Accounts from configuration rather than the registry (TENANTRY_MODEL_BASE_URL, or
        # the built-in scripted model), with their keys.
        self._implicit = {account.account_id: (account, key) for account, key in implicit}
        self._load = load_accounts or (self._load_registered if db is not None else None)
        self._client_factory = client_factory
        self._sleep = sleep
        self._clock = clock
        self._wake_parked = wake_parked or (self._wake_registered if db is not None else None)
        self._routes: dict[str, Route] = {}
        self._loaded = False  # the registered accounts read once (refresh)
        self._accounts: list[ModelAccount] = []
        self._tasks: list[asyncio.Task[None]] = []
        self._recoveries = 0  # failing accounts found serving again, ever
        self._shares = None if db is None else CapacityShares(
            db, holder or f"gateway-{uuid.uuid4().hex[:12]}", self.settings.shares)
        self._set_accounts([a for a, _ in implicit])

    # -- lifecycle --------------------------------------------------------------------

    async def __aenter__(self) -> Self:
        await self.refresh()  # builds the accounts' clients too (_warm)
        await self.renew_shares()
        self._tasks = [asyncio.create_task(self._refresh_loop(), name="model-accounts"),
                       asyncio.create_task(self._probe_loop(), name="model-probes")]
        if self._shares is not None:
            self._tasks.append(asyncio.create_task(self._share_loop(), name="model-shares"))
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []
        if self._shares is not None:
            await self._shares.leave()
        for route in self._routes.values():
            await self._close_client(route)

    async def refresh(self) -> None:
        """Re-read the registered accounts (new ones appear, disabled ones go)."""
        if self._load is None:
            await self._warm()
            return
        try:
            registered = list(await self._load())
        except DATABASE_DOWN as exc:
            if self._db is not None:
                self._db.outage.failed("model accounts refresh", exc)
            await self._warm()  # the configured accounts need no database
            return
        known, self._loaded = (self._routes if self._loaded else None), True
        retired = self._set_accounts([*registered,
                                      *(a for a, _ in self._implicit.values())])
        for route in retired:
            await self._close_client(route)
        await self._warm()
        # An account new to this cache: runs this worker parked for want of it (claimed
        # after its registration woke the parked ones, before this cache learned of it)
        # may be served now. Not on the first load: nothing was parked by this cache yet.
        for key, route in list(self._routes.items()):
            if known is not None and known.get(key) is not route:
                await self._wake(route.account)

    async def _warm(self) -> None:
        """Build each new account's client now rather than in its first call, which would
        wait for it: the process's TLS context (the CA bundle) and the wire module — 0.7 s
        of a process's first call before the TLS context was shared
        (benchmarks/first_model_call.py). Only accounts whose key needs no vault read:
        building their client never suspends, so no call can race it (a vault account's
        client stays lazy)."""
        for route in list(self._routes.values()):
            account = route.account
            if route.warmed or route.client is not None or account.secret_name is not None:
                continue
            route.warmed = True
            try:
                await self._client(route, account.tenant or "")
            except AccountUnusable as exc:  # its calls will say so (and mark it failing)
                logger.info("model account client not built at start: %s", exc.detail,
                            extra={"account": account.account_id})

    async def _load_registered(self) -> Sequence[ModelAccount]:
        assert self._db is not None
        return await account_store.list_enabled(self._db)

    async def _wake_registered(self, account: ModelAccount, limit: int | None) -> int:
        assert self._db is not None
        return await account_store.wake_parked_for(self._db, account, limit)

    def _set_accounts(self, accounts: list[ModelAccount]) -> list[Route]:
        settings, retired = self.settings, []
        if settings.no_stream:
            accounts = [replace(a, stream=False) if a.account_id in settings.no_stream
                        or "*" in settings.no_stream else a for a in accounts]
        fresh: dict[str, Route] = {}
        for account in accounts:
            route = self._routes.get(account.account_id)
            if route is not None and route.account == account:
                fresh[account.account_id] = route
                continue
            if route is not None:
                retired.append(route)  # changed: new client, same breaker history
            fresh[account.account_id] = Route(
                account,
                route.breaker if route else CircuitBreaker(
                    settings.breaker_threshold, settings.breaker_reset_seconds,
                    settings.breaker_max_reset_seconds, clock=self._clock),
                AccountCapacity(account.rpm, account.tpm),
            )
            if self._shares is not None and limited(account):
                self._shares.join(account, fresh[account.account_id].capacity)
        retired.extend(r for k, r in self._routes.items() if k not in fresh)
        self._routes = fresh
        self._accounts = accounts
        return retired

    # -- status (console, metrics, tests) -------------------------------------------

    def breaker_states(self) -> dict[str, str]:
        return {key: route.breaker.state for key, route in self._routes.items()}

    def accounts(self) -> list[ModelAccount]:
        return list(self._accounts)

    # -- the ladder ---------------------------------------------------------------------

    async def complete(self, request: ModelRequest) -> ModelReply:
        tried, recoveries = Attempts(), self._recoveries
        models = [request.model, *(m for m in request.fallback_models if m != request.model)]
        soonest: float | None = None
        for model in models:
            routes = [self._routes[a.account_id] for a in candidates(
                self._accounts, model=model, tenant=request.tenant, region=request.region,
                run_key=request.run_key, current=request.account) if a.account_id in self._routes]
            if not routes:
                where = f" in region {request.region}" if request.region not in ("", "default") \
                    else ""
                tried.add(f"no account{where} serves {model}")
                continue
            for route in routes:
                reply = await self._try_account(route, replace(request, model=model), tried)
                if reply is not None:
                    return self._explain(request, reply, tried)
                wait = route.breaker.seconds_until_half_open()
                soonest = wait if soonest is None else min(soonest, wait)
        exhausted = ModelsExhausted(
            f"no account could serve {', '.join(models)}: {tried.summary()}",
            models=models, retry_seconds=max(soonest or 0.0, 1.0),
        )
        exhausted._recovered = lambda: self._recoveries != recoveries
        raise exhausted

    async def _try_account(
        self, route: Route, request: ModelRequest, tried: Attempts,
    ) -> ModelReply | None:
        settings, name = self.settings, route.account.account_id
        estimate = 0
        if route.account.tpm:
            estimate = request.estimated_tokens or sum(estimate_tokens(
                request.messages, request.tools, request.max_tokens))
        for attempt in range(settings.attempts_per_account):
            if not route.breaker.allow():
                tried.add(f"{name}: breaker {route.breaker.state}")
                return None
            try:
                client = await self._client(route, request.tenant)
                await route.capacity.acquire(request.tenant, in_flight=request.in_flight,
                                             tokens=estimate)
                # Held snapshots go out only on accounts of the owner that reported them.
                reply = await client.complete(request.on_account(route.account.owner))
            except ModelRefused:
                route.breaker.release()
                self._observe(request, route, "refused")
                raise
            except RateLimited as exc:
                route.breaker.release()  # busy is not broken
                self._observe(request, route, "rate_limited")
                route.capacity.rate_limited(exc.retry_after)
                tried.add(f"{name}: rate limited")
                if (exc.retry_after or 0.0) > settings.max_retry_after_seconds:
                    return None
                continue  # the capacity gate holds the call until Retry-After has passed
            except AccountUnusable as exc:
                route.breaker.failed()
                self._observe(request, route, "unusable")
                tried.add(f"{name}: {exc.detail[:120]}")
                route.credential_read_at = 0.0  # maybe the key was rotated: read it again
                return None
            except ModelError as exc:
                route.breaker.failed()
                self._observe(request, route, "error")
                tried.add(f"{name}: {exc.detail[:120]}")
                if attempt + 1 < settings.attempts_per_account:
                    await self._sleep(self._backoff(attempt, exc.retry_after))
                continue
            except BaseException:
                # Cancelled (the run was cancelled, its lease lost) or a fault of ours: no
                # verdict on the account, and a half-open slot must not stay taken for good.
                route.breaker.release()
                raise
            self._observe(request, route, "ok")
            was_failing = route.breaker.failures > 0 or route.breaker.state != "closed"
            route.breaker.succeeded()
            route.capacity.observe(reply.rate_limits)
            route.capacity.settle(estimate, reply.usage.total_tokens)
            if was_failing:  # runs may have parked while it failed
                self._recoveries += 1
                self._wake_later(route.account)
            return replace(reply, account_owner=route.account.owner)
        return None

    def _observe(self, request: ModelRequest, route: Route, outcome: str) -> None:
        if self._observer is not None:
            self._observer.model_call(request.tenant, route.account.provider,
                                      route.account.account_id, outcome)

    def _backoff(self, attempt: int, retry_after: float | None) -> float:
        settings = self.settings
        if retry_after is not None and retry_after <= settings.max_retry_after_seconds:
            return retry_after
        return backoff(attempt + 1, first=settings.backoff_seconds,
                       cap=settings.max_backoff_seconds)

    @staticmethod
    def _explain(request: ModelRequest, reply: ModelReply, tried: Attempts) -> ModelReply:
        """Say why this reply came from elsewhere than the run's previous step."""
        reasons = []
        if request.previous_model and reply.model != request.previous_model:
            if reply.model == request.model:
                reasons.append(f"{request.model} is available again")
            else:
                reasons.append(tried.summary())
        elif request.account and reply.account != request.account:
            reasons.append(tried.summary())
        if not reasons:
            return reply
        return replace(reply, switch_reason=reasons[0])

    # -- clients and credentials --------------------------------------------------------

    async def _client(self, route: Route, tenant: str) -> ProviderClient:
        account = route.account
        stale = (account.secret_name is not None and time.monotonic() - route.credential_read_at
                 > self.settings.credential_ttl_seconds)
        if route.client is not None and not stale:
            return route.client
        key = await api_key(account, self._implicit.get(account.account_id),
                            master=self._master, vault=self._vault)
        await self._close_client(route)
        route.client = self._client_factory(account, key, self.settings.call_timeout_seconds)
        route.credential_read_at = time.monotonic()
        return route.client

    async def _close_client(self, route: Route) -> None:
        if route.client is not None:
            client, route.client = route.client, None
            await client.aclose()

    # -- recovery -------------------------------------------------------------------------

    async def _refresh_loop(self) -> None:
        while True:
            await asyncio.sleep(self.settings.refresh_seconds)
            await self.refresh()

    async def renew_shares(self) -> None:
        """Publish this process's demand and take its share of each limited account (the
        background loop does this every few seconds; a test may too)."""
        if self._shares is not None:
            await self._shares.renew({key: (route.account, route.capacity)
                                      for key, route in self._routes.items()})

    async def _share_loop(self) -> None:
        assert self._shares is not None
        settings = self._shares.settings
        while True:
            await asyncio.sleep(settings.short_renew_seconds if self._shares.short
                                else settings.renew_seconds)
            await self.renew_shares()

    async def _probe_loop(self) -> None:
        """Ask providers behind open breakers whether they are back, once each is due."""
        while True:
            await asyncio.sleep(self.settings.probe_interval_seconds)
            self.probe_due()

    def probe_due(self) -> list[asyncio.Task[None]]:
        """Start a probe of every half-open account that is due one (the background loop
        calls this; a test may too, and await what it started)."""
        now, started = self._clock(), []
        for route in list(self._routes.values()):
            if route.breaker.state == "half_open" and not route.probing \
                    and now >= route.probe_after:
                route.probing = True
                started.append(self._background(self._probe(route), "model-probe"))
        return started

    async def _probe(self, route: Route) -> None:
        account = route.account
        try:
            if not route.breaker.allow():
                return  # a real call holds the half-open slot: it is the probe
            try:
                client = await self._client(route, account.tenant or "")
                await client.probe()
            except ModelError as exc:
                if probe_tells_nothing(exc):
                    route.breaker.release()  # not a failure: leave the slot to a real call
                    await self._probe_with_runs(route, exc)
                    return
                route.breaker.failed()
                logger.info("model account still unavailable: %s", exc.detail,
                            extra={"account": account.account_id})
                return
            except BaseException:
                route.breaker.release()
                raise
            route.breaker.succeeded()
            self._recoveries += 1
            logger.info("model account is back", extra={"account": account.account_id})
            await self._wake(account)
        finally:
            route.probing = False

    async def _probe_with_runs(self, route: Route, exc: ModelError) -> None:
        """The probe told nothing: wake a few runs parked on the account's models, so that a
        real call takes the half-open slot — its success closes the breaker and wakes the
        rest, its failure opens the breaker again. Wake twice as many each time the slot is
        still free when the retry comes, so the runs that can use the account are reached
        whoever else is parked; a new opening of the breaker starts again from a few."""
        settings, breaker = self.settings, route.breaker
        if route.woken_for != breaker.opened_at:
            route.woken_for, route.woken = breaker.opened_at, max(1, settings.probe_runs)
            logger.info("model account's probe tells nothing (%s): parked runs will try it",
                        exc.detail[:200], extra={"account": route.account.account_id})
        else:
            route.woken = min(route.woken * 2, account_store.WAKE_BATCH)
        route.probe_after = self._clock() + settings.probe_runs_retry_seconds
        await self._wake(route.account, route.woken)

    def _wake_later(self, account: ModelAccount) -> None:
        self._background(self._wake(account), "model-wake")

    def _background(self, work: Coroutine[Any, Any, None], name: str) -> asyncio.Task[None]:
        task = asyncio.create_task(work, name=name)
        self._tasks.append(task)
        task.add_done_callback(lambda t: self._tasks.remove(t) if t in self._tasks else None)
        return task

    async def _wake(self, account: ModelAccount, limit: int | None = None) -> None:
        """Queue the runs parked on the account's models: ``limit`` of them, or all."""
        if self._wake_parked is None:
            return
        with contextlib.suppress(*DATABASE_DOWN):
            woken = await self._wake_parked(account, limit)
            if woken:
                logger.info("woke %d parked runs", woken,
                            extra={"account": account.account_id})

