"""``runs.wait``'s rule, shared by both clients: after each read of the run, stop (the run
has a status asked for, or has ended), time out, or pause — 0.1 s at first, doubling up to
the poll interval, never past the deadline. ``evaluations.wait`` and ``exports.wait`` pause
the same way."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import Protocol, TypeVar

from tenantry.backoff import backoff
from tenantry.client.errors import WaitTimeout
from tenantry.client.evaluations import Evaluation
from tenantry.client.exports import Export
from tenantry.client.models import TERMINAL_STATUSES, Run

FIRST_PAUSE = 0.1

T = TypeVar("T")
T_contra = TypeVar("T_contra", contravariant=True)


class Rule(Protocol[T_contra]):
    def next_pause(self, value: T_contra) -> float | None: ...


def poll(read: Callable[[], T], rule: Rule[T]) -> T:
    """``read()`` again, after each pause ``rule`` gives, until it says stop (None); its
    WaitTimeout past the deadline."""
    while True:
        value = read()
        pause = rule.next_pause(value)
        if pause is None:
            return value
        time.sleep(pause)


async def poll_async(read: Callable[[], Awaitable[T]], rule: Rule[T]) -> T:
    """:func:`poll` for the asyncio client."""
    while True:
        value = await read()
        pause = rule.next_pause(value)
        if pause is None:
            return value
        await asyncio.sleep(pause)


class _Pauses:
    """The pauses between reads, and the deadline they never pass."""

    def __init__(self, timeout: float | None, poll_interval: float) -> None:
        if poll_interval <= 0:
            raise ValueError("poll_interval must be positive")
        self.deadline = None if timeout is None else time.monotonic() + timeout
        self.timeout = timeout
        self.poll_interval = poll_interval
        self.reads = 0

    def _pause(self) -> float | None:
        """The next pause; None: the deadline has passed."""
        self.reads += 1
        # No jitter: a poll's schedule is the caller's, stated in its docs.
        pause = backoff(self.reads, first=min(FIRST_PAUSE, self.poll_interval),
                        cap=self.poll_interval, jitter=False)
        if self.deadline is None:
            return pause
        left = self.deadline - time.monotonic()
        return min(pause, left) if left > 0 else None


class Waiting(_Pauses):
    def __init__(self, run_id: str, timeout: float | None, status: str | Iterable[str] | None,
                 poll_interval: float) -> None:
        super().__init__(timeout, poll_interval)
        self.run_id = run_id
        self.wanted = frozenset([status] if isinstance(status, str) else status or ())

    def next_pause(self, run: Run) -> float | None:
        """None: return ``run``. Raises WaitTimeout past the deadline."""
        if run.status in self.wanted or run.status in TERMINAL_STATUSES:
            return None
        pause = self._pause()
        if pause is None:
            wanted = " or ".join(sorted(self.wanted)) or "its end"
            raise WaitTimeout(f"{self.run_id} did not reach {wanted} within "
                              f"{self.timeout:g} s; it is {run.status}", run=run)
        return pause


class EvaluationWaiting(_Pauses):
    """``evaluations.wait``'s rule: the same pauses, until the evaluation has finished
    (every run of it ended)."""

    def __init__(self, evaluation_id: str, timeout: float | None,
                 poll_interval: float) -> None:
        super().__init__(timeout, poll_interval)
        self.evaluation_id = evaluation_id

    def next_pause(self, evaluation: Evaluation) -> float | None:
        """None: return ``evaluation``. Raises WaitTimeout past the deadline (its ``run``
        is the evaluation as last read)."""
        if evaluation.finished:
            return None
        pause = self._pause()
        if pause is None:
            running = sum(t.running for t in evaluation.totals.values())
            raise WaitTimeout(f"{self.evaluation_id} did not finish within "
                              f"{self.timeout:g} s; {running} of its runs go on",
                              run=evaluation)
        return pause


class ExportWaiting(_Pauses):
    """``exports.wait``'s rule: the same pauses, until the export is ready or failed."""

    def __init__(self, export_id: str, timeout: float | None, poll_interval: float) -> None:
        super().__init__(timeout, poll_interval)
        self.export_id = export_id

    def next_pause(self, export: Export) -> float | None:
        """None: return ``export``. Raises WaitTimeout past the deadline (its ``run`` is
        the export as last read)."""
        if export.ended:
            return None
        pause = self._pause()
        if pause is None:
            raise WaitTimeout(f"{self.export_id} was not ready within {self.timeout:g} s; "
                              f"it is {export.status}", run=export)
        return pause
