"""How much an account can take right now, and who goes first when it cannot.

Each account has local token buckets at its ``rpm``/``tpm``, corrected by what the provider
says: rate-limit headers (remaining 0 → nothing until the reset) and 429s (nothing until
``Retry-After``). When the account is short, callers wait in a queue ordered by (later
steps of runs already in flight first, then the tenant served least so far on this
account, then arrival), so a burst of new runs from one tenant cannot starve runs that are
half done, nor other tenants.

With several worker processes, the gateway gives each bucket this process's share of the
account (:meth:`AccountCapacity.set_rates`, ADR 0021): a rate, paced (one request in
hand at most, no tokens ahead), and until when the share is held — past that, a
conservative fallback. The buckets also count what was asked of them
(:meth:`AccountCapacity.demand`), by which the shares are divided. (Tenants' own token
budgets are durable — the scheduler's job.)"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass

from tenantry.models.shares import Demand
from tenantry.models.types import RateLimitInfo

# While an account has no rate at all (no share yet), waiters look again this often.
_RECHECK_SECONDS = 0.25


@dataclass(frozen=True, slots=True)
class Rates:
    """What a bucket allows: requests and tokens per minute (None: no limit), and how many
    seconds of them it may hold when idle (its burst; a request bucket holds at least one).
    A burst of 0 paces calls evenly: over any window the bucket lets through its rate's
    worth plus one request (and one call's tokens), however the window falls."""

    rpm: float | None = None
    tpm: float | None = None
    burst_seconds: float = 60.0

    @property
    def request_cap(self) -> float:
        if not self.rpm:  # no share (yet): not even one request
            return 0.0
        return max(1.0, self.rpm * self.burst_seconds / 60.0)

    @property
    def token_cap(self) -> float:
        return (self.tpm or 0.0) * self.burst_seconds / 60.0


@dataclass(slots=True)
class _Waiter:
    arrival: int
    tokens: int
    future: asyncio.Future[None]


class AccountCapacity:
    def __init__(
        self, rpm: int | None = None, tpm: int | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.rpm, self.tpm = rpm, tpm
        self._clock = clock
        now = clock()
        # The account's own limits, a minute's worth held: one process, the whole account.
        self._rates = Rates(rpm or None, tpm or None)
        self._fallback = self._rates
        self._until: float | None = None  # monotonic: past it, _fallback applies
        self._requests = float(rpm or 0)
        self._tokens = float(tpm or 0)
        self._refilled = now
        self._blocked_until = 0.0
        # Waiting calls by (class, tenant): class 0 = later steps of runs in flight.
        self._queues: dict[tuple[int, str], deque[_Waiter]] = {}
        self._served: Counter[str] = Counter()
        self._arrivals = itertools.count()
        self._drainer: asyncio.Task[None] | None = None
        # Asked of this bucket since the last demand() (calls, tokens), by (class, tenant).
        self._asked: Counter[tuple[int, str]] = Counter()
        self._asked_tokens: Counter[tuple[int, str]] = Counter()

    @property
    def waiting(self) -> int:
        return sum(1 for q in self._queues.values() for w in q if not w.future.done())

    def blocked_for(self) -> float:
        return max(0.0, self._blocked_until - self._clock())

    # -- this process's share (ADR 0021) ----------------------------------------------

    def set_rates(self, rates: Rates, *, until: float | None = None,
                  fallback: Rates | None = None) -> None:
        """From now on allow ``rates``; past ``until`` (monotonic), ``fallback`` instead
        (a share not renewed in time may have been given to others). What the bucket holds
        is kept, down to the new burst."""
        self._refill(self._clock())  # what accrued so far, at the old rate
        self._rates, self._until = rates, until
        self._fallback = fallback or rates
        current = self.rates
        self._requests = min(self._requests, current.request_cap)
        self._tokens = min(self._tokens, current.token_cap)

    @property
    def rates(self) -> Rates:
        if self._until is not None and self._clock() >= self._until:
            return self._fallback
        return self._rates

    def demand(self, *, tokens: bool, elapsed: float, horizon: float) -> Demand:
        """What was wanted of this bucket, per minute, since the last call (``elapsed``
        seconds ago): the calls (or with ``tokens``, their tokens) that asked, plus those
        still waiting, which want to go within ``horizon`` seconds."""
        asked = self._asked_tokens if tokens else self._asked
        per_minute = 60.0 / max(elapsed, 1e-3)
        wanted: dict[tuple[int, str], float] = {
            key: count * per_minute for key, count in asked.items()}
        for key, queue in self._queues.items():
            for waiter in queue:
                if not waiter.future.done():
                    wanted[key] = wanted.get(key, 0.0) + (
                        (waiter.tokens if tokens else 1) * 60.0 / horizon)
        self._asked.clear()
        self._asked_tokens.clear()
        fresh: dict[str, float] = {}
        for (cls, tenant), value in wanted.items():
            if cls == 1:
                fresh[tenant] = fresh.get(tenant, 0.0) + value
        return Demand(in_flight=sum(v for (cls, _), v in wanted.items() if cls == 0),
                      tenants=fresh)

    # -- what the provider told us --------------------------------------------------

    def observe(self, info: RateLimitInfo | None) -> None:
        """Headers from a reply: an exhausted limit blocks the account until its reset."""
        if info is None:
            return
        for remaining, reset in ((info.remaining_requests, info.reset_requests_seconds),
                                 (info.remaining_tokens, info.reset_tokens_seconds)):
            if remaining is not None and remaining <= 0:
                self._block(reset if reset is not None else 1.0)

    def rate_limited(self, retry_after: float | None) -> None:
        """The provider answered 429: nobody calls this account until ``retry_after``."""
        self._block(retry_after if retry_after is not None else 1.0)

    def settle(self, estimated: int, actual: int) -> None:
        """Correct the token bucket once the provider reported what a call really used."""
        if self.rates.tpm is not None:
            self._tokens -= actual - estimated

    # -- taking capacity ------------------------------------------------------------

    async def acquire(self, tenant: str, *, in_flight: bool, tokens: int) -> None:
        """Return when this call may go; wait in fair order while the account is short."""
        key = (0 if in_flight else 1, tenant)
        self._asked[key] += 1
        self._asked_tokens[key] += tokens
        if not self._queues and self._wait_for(tokens) == 0.0:
            self._grant(tenant, tokens)
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        # A tenant that starts waiting joins at the least-served waiting tenant's count
        # (fair queuing's virtual start time): it cannot claim credit for the time it was
        # not waiting and then crowd everyone else out.
        floor = min((self._served[t] for _, t in self._queues), default=None)
        if floor is not None and self._served[tenant] < floor:
            self._served[tenant] = floor
        self._queues.setdefault(key, deque()).append(
            _Waiter(next(self._arrivals), tokens, future))
        if self._drainer is None or self._drainer.done():
            self._drainer = asyncio.create_task(self._drain(), name="model-capacity")
        await future

    def _next(self) -> tuple[tuple[int, str], _Waiter] | None:
        """The call to serve next: runs in flight first, then the tenant served least on
        this account so far, then the earliest."""
        best: tuple[tuple[int, int, int], tuple[int, str], _Waiter] | None = None
        for key, queue in list(self._queues.items()):
            while queue and queue[0].future.done():  # the caller gave up (cancelled)
                queue.popleft()
            if not queue:
                del self._queues[key]
                continue
            rank = (key[0], self._served[key[1]], queue[0].arrival)
            if best is None or rank < best[0]:
                best = (rank, key, queue[0])
        return None if best is None else (best[1], best[2])

    async def _drain(self) -> None:
        while (picked := self._next()) is not None:
            key, waiter = picked
            delay = self._wait_for(waiter.tokens)
            if delay > 0:
                # In slices: a reply's headers, a 429 or a new share meanwhile can change
                # the answer.
                await asyncio.sleep(min(delay, _RECHECK_SECONDS))
                continue
            self._queues[key].popleft()
            self._grant(key[1], waiter.tokens)
            waiter.future.set_result(None)

    def _grant(self, tenant: str, tokens: int) -> None:
        self._take(tokens)
        self._served[tenant] += 1

    def _wait_for(self, tokens: int) -> float:
        now = self._clock()
        self._refill(now)
        rates = self.rates
        wait = max(0.0, self._blocked_until - now)
        if rates.rpm is not None and self._requests < 1:
            wait = max(wait, (1 - self._requests) * 60.0 / rates.rpm if rates.rpm > 0
                       else _RECHECK_SECONDS)
        if rates.tpm is not None:
            # A call larger than the bucket can hold still goes, once the bucket is full.
            need = min(tokens, rates.token_cap)
            if rates.tpm <= 0:
                wait = max(wait, _RECHECK_SECONDS)
            elif self._tokens < need:
                wait = max(wait, (need - self._tokens) * 60.0 / rates.tpm)
        return wait

    def _take(self, tokens: int) -> None:
        rates = self.rates
        if rates.rpm is not None:
            self._requests -= 1
        if rates.tpm is not None:
            self._tokens -= tokens

    def _refill(self, now: float) -> None:
        elapsed = now - self._refilled
        self._refilled = now
        rates = self.rates
        if rates.rpm is not None:
            self._requests = min(rates.request_cap,
                                 self._requests + elapsed * rates.rpm / 60.0)
        if rates.tpm is not None:
            self._tokens = min(rates.token_cap, self._tokens + elapsed * rates.tpm / 60.0)

    def _block(self, seconds: float) -> None:
        self._blocked_until = max(self._blocked_until, self._clock() + max(0.0, seconds))
