"""When to send a request again, and after how long: no I/O here, so the sync and async
clients share every rule (and the unit tests try them without a server).

- A request that never left (the connection was not made, or no pooled connection was
  free) may always be sent again.
- Anything else is sent again only when the call is safe to repeat: a GET, a cancel, or a
  ``POST /v1/runs`` carrying an ``Idempotency-Key`` (the same key on every attempt). Those
  are retried after a transport error once the request went out (the answer was lost: the
  platform may have done it; the key makes the second attempt return the same run), and
  after a transient refusal: any 503, and a 429 whose problem type is not a tenant limit
  (``overloaded``: a capped event stream). ``quota_exceeded`` and ``budget_exhausted`` are
  not transient: they end when the tenant's runs end or its month does.
- The wait is the answer's ``Retry-After`` when it has one, else exponential backoff with
  jitter; the attempts are bounded in number (``max_retries``) and in total time
  (``deadline`` seconds from the first attempt): a wait that would end past the deadline is
  not started, and the last error is raised instead.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass

import httpx2

from tenantry.backoff import backoff
from tenantry.client.errors import NOT_RETRIED_TYPES, ApiError

#: Transport errors raised before any byte of the request was sent.
NOT_SENT = (httpx2.ConnectError, httpx2.ConnectTimeout, httpx2.PoolTimeout)


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """``max_retries`` attempts after the first; all of them within ``deadline`` seconds;
    backoff from ``backoff`` seconds doubling up to ``max_backoff`` (each wait drawn between
    half and all of that)."""

    max_retries: int = 4
    deadline: float = 60.0
    backoff: float = 0.25
    max_backoff: float = 8.0

    def __post_init__(self) -> None:
        if self.max_retries < 0 or self.deadline < 0 or self.backoff < 0:
            raise ValueError("max_retries, deadline and backoff must not be negative")

    def backoff_for(self, retry: int, rng: Callable[[], float] = random.random) -> float:
        """The wait before retry number ``retry`` (1-based) when the answer named none."""
        return backoff(retry, first=self.backoff, cap=self.max_backoff, rng=rng)


def retry_worthy(error: ApiError) -> bool:
    """A refusal that a later attempt of the same request may not meet."""
    if error.type in NOT_RETRIED_TYPES:
        return False
    if error.status == 503:
        return True
    return error.status == 429 and (error.type == "overloaded" or error.retry_after is not None)


@dataclass(frozen=True, slots=True)
class Retrying:
    """A call about to be sent again: why (one line), which retry, and how many seconds
    its attempts may still take at most."""

    reason: str
    retry: int
    seconds_left: float


OnRetry = Callable[[Retrying], None]


class Attempts:
    """The attempts of one call: ask it, after each failure, how long to wait before the
    next (None: give up and raise); ``on_retry`` is told of each retry."""

    def __init__(self, policy: RetryPolicy, *, idempotent: bool,
                 clock: Callable[[], float] = time.monotonic,
                 rng: Callable[[], float] = random.random,
                 on_retry: OnRetry | None = None) -> None:
        self.on_retry = on_retry
        self.policy = policy
        self.idempotent = idempotent
        self.clock = clock
        self.rng = rng
        self.started = clock()
        self.retries = 0

    def _wait(self, asked: float | None) -> float | None:
        if self.retries >= self.policy.max_retries:
            return None
        retry = self.retries + 1
        wait = asked if asked is not None else self.policy.backoff_for(retry, self.rng)
        if self.clock() + wait > self.started + self.policy.deadline:
            return None
        self.retries = retry
        return wait

    def retrying(self, reason: str) -> None:
        """Tell ``on_retry`` that a retry was decided, and why."""
        if self.on_retry is not None:
            left = self.started + self.policy.deadline - self.clock()
            self.on_retry(Retrying(reason, self.retries, max(left, 0.0)))

    def after_error(self, error: Exception) -> float | None:
        """A transport error (no answer)."""
        if isinstance(error, NOT_SENT) or (
                self.idempotent and isinstance(error, httpx2.TransportError)):
            return self._wait(None)
        return None

    def after_answer(self, error: ApiError) -> float | None:
        """An error answer."""
        if self.idempotent and retry_worthy(error):
            return self._wait(error.retry_after)
        return None
