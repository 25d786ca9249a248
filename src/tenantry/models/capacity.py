"""How much an account can take right now, and who goes first when it cannot.

Each account has local token buckets at its registered ``rpm``/``tpm``, corrected by what
the provider says: rate-limit headers (remaining 0 → nothing until the reset) and 429s
(nothing until ``Retry-After``). When the account is short, callers wait in a queue ordered
by (later steps of runs already in flight first, then the tenant served least so far on
this account, then arrival), so a burst of new runs from one tenant cannot starve runs
that are half done, nor other tenants.

The buckets are per process: with several workers each may use the account's full rate
until the provider's headers or a 429 say otherwise. (Tenants' own token budgets are
durable and shared — that is the scheduler's job, not this module's.)"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass

from tenantry.models.types import RateLimitInfo


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
        self._requests = float(rpm or 0)
        self._tokens = float(tpm or 0)
        self._refilled = now
        self._blocked_until = 0.0
        # Waiting calls by (class, tenant): class 0 = later steps of runs in flight.
        self._queues: dict[tuple[int, str], deque[_Waiter]] = {}
        self._served: Counter[str] = Counter()
        self._arrivals = itertools.count()
        self._drainer: asyncio.Task[None] | None = None

    @property
    def waiting(self) -> int:
        return sum(1 for q in self._queues.values() for w in q if not w.future.done())

    def blocked_for(self) -> float:
        return max(0.0, self._blocked_until - self._clock())

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
        if self.tpm:
            self._tokens -= actual - estimated

    # -- taking capacity ------------------------------------------------------------

    async def acquire(self, tenant: str, *, in_flight: bool, tokens: int) -> None:
        """Return when this call may go; wait in fair order while the account is short."""
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
        key = (0 if in_flight else 1, tenant)
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
                # In slices: a reply's headers or a 429 meanwhile can change the answer.
                await asyncio.sleep(min(delay, 0.25))
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
        wait = max(0.0, self._blocked_until - now)
        if self.rpm and self._requests < 1:
            wait = max(wait, (1 - self._requests) * 60.0 / self.rpm)
        if self.tpm:
            need = min(tokens, self.tpm)  # a call larger than a minute's worth still goes
            if self._tokens < need:
                wait = max(wait, (need - self._tokens) * 60.0 / self.tpm)
        return wait

    def _take(self, tokens: int) -> None:
        if self.rpm:
            self._requests -= 1
        if self.tpm:
            self._tokens -= tokens

    def _refill(self, now: float) -> None:
        elapsed = now - self._refilled
        self._refilled = now
        if self.rpm:
            self._requests = min(float(self.rpm), self._requests + elapsed * self.rpm / 60.0)
        if self.tpm:
            self._tokens = min(float(self.tpm), self._tokens + elapsed * self.tpm / 60.0)

    def _block(self, seconds: float) -> None:
        self._blocked_until = max(self._blocked_until, self._clock() + max(0.0, seconds))
