"""A circuit breaker: an endpoint that keeps failing is not called for a while, so its
callers get a fast error (or another endpoint) instead of a timeout each, and a probe finds
out when it is back. Used per tool server (tools/gateway.py) and per model account
(models/gateway.py)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from tenantry.backoff import backoff


@dataclass(slots=True)
class CircuitBreaker:
    failure_threshold: int = 5
    reset_seconds: float = 30.0
    # With a maximum, each time the breaker opens again without a success in between, it
    # stays open twice as long (up to this): a long outage is probed ever more rarely.
    max_reset_seconds: float | None = None
    clock: Callable[[], float] = time.monotonic
    failures: int = 0
    opened_at: float | None = None
    opens: int = 0  # consecutive openings without a success
    probing: bool = field(default=False)

    @property
    def cooldown(self) -> float:
        if self.max_reset_seconds is None:
            return self.reset_seconds
        # No jitter: the cool-down is read again and again while the breaker is open.
        return backoff(self.opens, first=self.reset_seconds, cap=self.max_reset_seconds,
                       jitter=False)

    @property
    def state(self) -> str:
        if self.opened_at is None:
            return "closed"
        if self.clock() - self.opened_at >= self.cooldown:
            return "half_open"
        return "open"

    def seconds_until_half_open(self) -> float:
        if self.opened_at is None:
            return 0.0
        return max(0.0, self.opened_at + self.cooldown - self.clock())

    def allow(self) -> bool:
        """May a call go through now? In half-open, exactly one probe at a time."""
        state = self.state
        if state == "closed":
            return True
        if state == "half_open" and not self.probing:
            self.probing = True
            return True
        return False

    def succeeded(self) -> None:
        self.failures = 0
        self.opened_at = None
        self.opens = 0
        self.probing = False

    def release(self) -> None:
        """The probe ended with neither success nor failure (refused, cancelled)."""
        self.probing = False

    def failed(self) -> None:
        was_probing, self.probing = self.probing, False
        self.failures += 1
        if self.opened_at is None:
            if self.failures >= self.failure_threshold:
                self._open()
        elif was_probing or self.state == "half_open":
            self._open()  # the probe failed: open again, for longer
        # Already open: calls that started before it opened are failing too; that is not
        # news and must not stretch the cool-down.

    def _open(self) -> None:
        self.opened_at = self.clock()
        self.opens += 1
