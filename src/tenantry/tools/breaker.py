"""A circuit breaker per tool server: a server that keeps failing is not called for a while,
so one tenant's dead server costs its calls a fast error instead of a timeout each, and
nobody else anything."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass(slots=True)
class CircuitBreaker:
    failure_threshold: int = 5
    reset_seconds: float = 30.0
    clock: Callable[[], float] = time.monotonic
    failures: int = 0
    opened_at: float | None = None
    probing: bool = field(default=False)

    @property
    def state(self) -> str:
        if self.opened_at is None:
            return "closed"
        if self.clock() - self.opened_at >= self.reset_seconds:
            return "half_open"
        return "open"

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
        self.probing = False

    def release(self) -> None:
        """The probe ended with neither success nor failure (refused, cancelled)."""
        self.probing = False

    def failed(self) -> None:
        self.probing = False
        self.failures += 1
        if self.failures >= self.failure_threshold or self.opened_at is not None:
            self.opened_at = self.clock()
