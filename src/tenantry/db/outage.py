"""Saying once that the database went away, and once that it came back.

During an outage every loop of a process (claims, lease renewals, housekeeping, the event
hub, each request) fails about once a second. One line when the first failure is seen and
one when a connection works again tell an operator everything; the repeats in between go
to DEBUG. One ``Outage`` per process, shared by its pools (see ``Database.connect``)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable

log = logging.getLogger("tenantry.db")


class Outage:
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._since: float | None = None
        self._failures = 0
        self._back = asyncio.Event()  # set (and replaced) when an outage ends
        self._probing = False

    @property
    def down(self) -> bool:
        return self._since is not None

    def failed(self, where: str, exc: BaseException) -> None:
        """A database call failed because the database is not answering."""
        self._failures += 1
        if self._since is None:
            self._since = self._clock()
            log.warning("database unavailable (%s): %s; retrying, and saying nothing more "
                        "until it answers", where, one_line(exc))
        else:
            log.debug("database still unavailable (%s): %s", where, one_line(exc))

    def now(self) -> float:
        """This outage's clock: what a call notes when it starts, for :meth:`answered`."""
        return self._clock()

    def answered(self, started: float | None = None) -> None:
        """A database call worked: if an outage was reported, report its end. A call that
        ``started`` before the outage was first seen proves nothing about now: in a crash
        a pooled connection can finish one last statement just after another has failed."""
        if self._since is None or (started is not None and started < self._since):
            return
        seconds = self._clock() - self._since
        failures, self._since, self._failures = self._failures, None, 0
        log.warning("database answering again after %.1f s (%d failed attempts)",
                    seconds, failures)
        back, self._back = self._back, asyncio.Event()
        back.set()

    async def until_back(self, probe: Callable[[], Awaitable[object]], *, every: float,
                         within: float, failures: tuple[type[Exception], ...]) -> bool:
        """Wait until the database answers again (True), or ``within`` seconds (False).
        One waiter of the process at a time calls ``probe`` (a statement that ends the
        outage when it succeeds), every ``every`` seconds; the others wait for that — or any
        other call of the process — to see the database back: a hundred runs waiting out a
        failover cost one probe a second, not a hundred."""
        deadline = self._clock() + within
        while self.down:
            left = deadline - self._clock()
            if left <= 0:
                return False
            if self._probing:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._back.wait(), min(every, left))
                continue
            self._probing = True
            try:
                await asyncio.sleep(min(every, left))
                with contextlib.suppress(*failures):
                    await probe()
            finally:
                self._probing = False
        return True


def one_line(exc: BaseException) -> str:
    """The exception as one line: its type and its first message line."""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__
