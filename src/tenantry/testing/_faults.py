"""What the fake model server simulates of a provider's bad days: error answers
(:class:`Fault`, ``fail_next``), a streamed reply cut mid-way (:class:`StreamCut`,
``cut_next``; its uvicorn error line is quieted), and a requests-per-minute limit over a
sliding window (:class:`RequestWindow`, ``rpm``)."""

from __future__ import annotations

import logging
from collections import deque
from dataclasses import dataclass

from starlette.responses import Response

from tenantry.models.wire import Wire

_WINDOW_SECONDS = 60.0


@dataclass(frozen=True, slots=True)
class Fault:
    status: int
    retry_after: float | None


class StreamCut(Exception):
    """Raised inside a streamed reply to close its connection mid-way (``cut_next``)."""


def is_cut(exc: BaseException | None) -> bool:
    """Whether ``exc`` is a :class:`StreamCut`, or holds one (a group, a cause)."""
    seen: set[int] = set()
    pending = [exc]
    while pending:
        found = pending.pop()
        if found is None or id(found) in seen:
            continue
        if isinstance(found, StreamCut):
            return True
        seen.add(id(found))
        if isinstance(found, BaseExceptionGroup):
            pending.extend(found.exceptions)
        pending += [found.__cause__, found.__context__]
    return False


class QuietCuts(logging.Filter):
    """uvicorn logs the exception that closes a cut stream as an application error: it is
    the fault a test asked for."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.exc_info and is_cut(record.exc_info[1]))


def quiet_cuts() -> None:
    uvicorn_log = logging.getLogger("uvicorn.error")
    if not any(isinstance(f, QuietCuts) for f in uvicorn_log.filters):
        uvicorn_log.addFilter(QuietCuts())


DOWN = "The server is temporarily unavailable."


class RequestWindow:
    """Requests admitted in the last ``seconds`` (a sliding window): ``limit`` per window
    (``rpm`` scaled to the window, at least one)."""

    def __init__(self, rpm: int, seconds: float = _WINDOW_SECONDS) -> None:
        self.rpm, self.seconds = rpm, seconds
        self.limit = max(1, round(rpm * seconds / _WINDOW_SECONDS))
        self._admitted: deque[float] = deque()
        self.history: list[float] = []  # every admission, for the tests' counts

    def _expire(self, now: float) -> None:
        while self._admitted and self._admitted[0] <= now - self.seconds:
            self._admitted.popleft()

    def admit(self, now: float) -> float | None:
        """``None`` if a request may go ahead now (it is counted), else the seconds until
        one may."""
        self._expire(now)
        if len(self._admitted) >= self.limit:
            return self._admitted[0] + self.seconds - now
        self._admitted.append(now)
        self.history.append(now)
        return None

    def state(self, now: float) -> tuple[int, float]:
        """``(remaining, seconds until the window is empty again)``."""
        self._expire(now)
        reset = self._admitted[-1] + self.seconds - now if self._admitted else 0.0
        return self.limit - len(self._admitted), reset


def fault_response(wire: Wire, fault: Fault) -> Response:
    headers: dict[str, str] = {}
    if fault.retry_after is not None:
        value = fault.retry_after
        headers["retry-after"] = str(int(value)) if value == int(value) else str(value)
        headers["retry-after-ms"] = str(int(value * 1000))
    return wire.error(fault.status, headers=headers)
