"""What ``enqueue`` answers: a typed value for every admission outcome (invariant 8).

A refusal is an expected answer a caller must branch on — ``match result: case
QuotaExceeded(...)`` — not an exception to forget to catch. These are values, distinct from
the exceptions of the same names in :mod:`tenantry.errors` (which the HTTP API raises);
``to_error()`` gives that exception for callers that would rather raise.
Everything that is not an admission outcome (a bad argument, an unknown tenant, an
idempotency key reused with a different task) is still raised.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, TypeAlias

from tenantry import errors
from tenantry.ids import RunId
from tenantry.runs.events import RunStatus

#: The platform's name for a limit → the library's name for it (see values.TenantPolicy).
_LIMIT_NAMES = {"max_queued": "max_non_terminal", "max_running": "max_leases"}
_PLATFORM_NAMES = {library: platform for platform, library in _LIMIT_NAMES.items()}


@dataclass(frozen=True, slots=True)
class Admitted:
    """The task is stored and queued. ``created`` is False when an earlier ``enqueue``
    with the same idempotency key stored it (then ``status`` is its status now)."""

    task_id: RunId
    status: RunStatus = RunStatus.QUEUED
    created: bool = True
    type: ClassVar[str] = "admitted"


@dataclass(frozen=True, slots=True)
class QuotaExceeded:
    """The tenant has ``current`` tasks and runs not yet ended; its limit is
    ``limit_value``. Nothing was written. Retry when some have ended."""

    detail: str
    limit: str
    limit_value: int
    current: int
    type: ClassVar[str] = errors.QuotaExceeded.type
    retryable: ClassVar[bool] = True

    def to_error(self) -> errors.QuotaExceeded:
        return errors.QuotaExceeded(self.detail, limit=self.limit,
                                    limit_value=self.limit_value, current=self.current)


@dataclass(frozen=True, slots=True)
class BudgetExhausted:
    """The tenant has spent ``current`` of its monthly cap (``limit_value``, micro-dollars).
    Nothing was written. Not retryable until the cap is raised or the month turns."""

    detail: str
    limit: str
    limit_value: int
    current: int
    type: ClassVar[str] = errors.BudgetExhausted.type
    retryable: ClassVar[bool] = False

    def to_error(self) -> errors.BudgetExhausted:
        return errors.BudgetExhausted(self.detail, limit=self.limit,
                                      limit_value=self.limit_value, current=self.current)


@dataclass(frozen=True, slots=True)
class Overloaded:
    """The whole cell sheds new work, whoever's it is (ADR 0008): past its batch level new
    ``batch`` tasks are refused, past its last level every new task. ``shed`` names the
    priorities refused now; ``queued`` is the cell's depth, ``limit_value`` the level's
    threshold (operator figures: don't pass them on to tenants). Nothing was written.
    Retry after ``retry_after`` seconds."""

    detail: str
    retry_after: int
    queued: int
    limit_value: int
    shed: tuple[str, ...] = ("batch", "interactive")
    type: ClassVar[str] = errors.Overloaded.type
    retryable: ClassVar[bool] = True

    def to_error(self) -> errors.Overloaded:
        return errors.Overloaded(self.detail, retry_after=self.retry_after,
                                 shed=list(self.shed), queued=self.queued,
                                 limit_value=self.limit_value)


def platform_error(result: QuotaExceeded | BudgetExhausted | Overloaded,
                   ) -> errors.QuotaExceeded | errors.BudgetExhausted | errors.Overloaded:
    """The exception the HTTP API raises for a refusal, with the platform's limit names
    (``max_queued``), so an activity task is refused exactly as a run is."""
    error = result.to_error()
    if "limit" in error.extra:
        error.extra["limit"] = _PLATFORM_NAMES.get(error.extra["limit"], error.extra["limit"])
    return error


EnqueueResult: TypeAlias = Admitted | Overloaded | QuotaExceeded | BudgetExhausted


def refusal(exc: errors.QuotaExceeded | errors.BudgetExhausted | errors.Overloaded,
            ) -> QuotaExceeded | BudgetExhausted | Overloaded:
    """The value for an admission refusal raised by the platform's admission code."""
    extra = exc.extra
    if isinstance(exc, errors.Overloaded):
        return Overloaded(exc.detail, int(extra.get("retry_after", 1)), exc.queued,
                          exc.limit_value, tuple(extra.get("shed", ("batch", "interactive"))))
    limit = str(extra.get("limit", ""))
    limit = _LIMIT_NAMES.get(limit, limit)
    value, current = int(extra.get("limit_value", 0)), int(extra.get("current", 0))
    if isinstance(exc, errors.QuotaExceeded):
        return QuotaExceeded(exc.detail, limit, value, current)
    return BudgetExhausted(exc.detail, limit, value, current)
