"""One root error type; subclasses carry the machine-readable fields the API maps to
RFC 9457 problem+json in one place (``tenantry.api.problems``)."""

from __future__ import annotations

import builtins
from typing import Any, ClassVar


class TenantryError(Exception):
    """Root of every error the platform raises on purpose.

    ``type`` is the stable problem type tenants may branch on; ``status`` the HTTP status
    the API answers with; ``retryable`` tells a caller whether the same request may work
    later. ``extra`` holds typed fields copied into the problem body (limits, counts).
    """

    type: ClassVar[str] = "internal_error"
    status: ClassVar[int] = 500
    title: ClassVar[str] = "Internal error"
    retryable: ClassVar[bool] = False

    def __init__(self, detail: str = "", **extra: Any) -> None:
        super().__init__(detail or self.title)
        self.detail = detail or self.title
        self.extra = extra

    def __init_subclass__(cls, *, problem: builtins.type[TenantryError] | None = None,
                          **kwargs: Any) -> None:
        """``problem``: the error whose problem type this class stands for elsewhere (the
        client's reading of a platform answer): its type, status, title and retryable,
        declared once, in that class."""
        super().__init_subclass__(**kwargs)
        if problem is not None:
            cls.type, cls.status, cls.title = problem.type, problem.status, problem.title
            cls.retryable = problem.retryable


class NotFound(TenantryError):
    """Also what another tenant's resource looks like: never say it exists."""

    type = "not_found"
    status = 404
    title = "Not found"


class ValidationFailed(TenantryError):
    type = "validation_error"
    status = 400
    title = "Invalid request"


class Unauthorized(TenantryError):
    type = "unauthorized"
    status = 401
    title = "Missing or invalid credentials"


class Forbidden(TenantryError):
    """Authenticated, but the key lacks the scope this needs (``extra['scope']`` names
    it): another key, or a wider one, would do."""

    type = "forbidden"
    status = 403
    title = "Not allowed for this key"


class Conflict(TenantryError):
    type = "conflict"
    status = 409
    title = "Conflict"


class TenantErased(Conflict):
    """The tenant is being (or has been) erased (ADR 0017): it admits nothing more — no
    run, no task. Not retryable: an erased tenant stays erased."""

    type = "tenant_erased"
    title = "Tenant erased"


class AdmissionsPaused(Conflict):
    """An operator paused the tenant's admissions (the console, or PUT
    /admin/v1/tenants/{id}/admissions): no new run or task until they resume them; runs
    already admitted go on. A 409, not a 429: it is the tenant's state, not its rate, and
    no amount of waiting ends it, so not retryable — a person resumes it."""

    type = "admissions_paused"
    title = "Admissions paused"


class PayloadTooLarge(TenantryError):
    type = "payload_too_large"
    status = 413
    title = "Request body too large"


class QuotaExceeded(TenantryError):
    type = "quota_exceeded"
    status = 429
    title = "Tenant quota exceeded"
    retryable = True


class Overloaded(TenantryError):
    """The cell sheds new runs (ADR 0008). ``queued`` and ``limit_value`` — the cell's depth
    and the level's threshold — are for the operator's side (the library's value, logs):
    kept out of ``extra``, so the problem body never shows tenants the cell's depth."""

    type = "overloaded"
    status = 503
    title = "Platform overloaded"
    retryable = True

    def __init__(self, detail: str = "", *, queued: int = 0, limit_value: int = 0,
                 **extra: Any) -> None:
        super().__init__(detail, **extra)
        self.queued = queued
        self.limit_value = limit_value


class BudgetExhausted(TenantryError):
    type = "budget_exhausted"
    status = 429
    title = "Budget exhausted"


class LeaseLost(TenantryError):
    """A writer's lease epoch moved on (or its slot was taken): it must stop writing."""

    type = "lease_lost"
    status = 409
    title = "Lease lost"


class ConfigurationError(TenantryError):
    type = "configuration_error"
    status = 500
    title = "Invalid configuration"


class DatabaseUnavailable(TenantryError):
    type = "database_unavailable"
    status = 503
    title = "Database unavailable"
    retryable = True


class TenantMoving(TenantryError):
    """The tenant is being moved to another cell (ADR 0029; the directory's ``state`` is
    ``moving``, the cell's ``frozen_tenants`` holds it): for the few seconds its runs take
    to reach a step's end and its rows to be copied, nothing of it is admitted or changed.
    Retryable: the same request, sent again, reaches its new cell."""

    type = "tenant_moving"
    status = 503
    title = "Tenant moving"
    retryable = True

    def __init__(self, detail: str = "", **extra: Any) -> None:
        extra.setdefault("retry_after", TENANT_MOVING_RETRY_AFTER)
        super().__init__(detail or "This tenant is moving to another cell; retry shortly.",
                         **extra)


#: Seconds a refused request of a moving tenant is told to wait (a move's lock is short).
TENANT_MOVING_RETRY_AFTER = 5


class ToolUnavailable(TenantryError):
    """A tool server could not be reached, failed, or did not answer in time. The call may or
    may not have run: retry only with the same idempotency key (invariant 3 of
    docs/reference/architecture.md). A tool that answered with an error is not this: that
    answer is information for the model."""

    type = "tool_unavailable"
    status = 502
    title = "Tool server unavailable"
    retryable = True


class UnpricedModel(TenantryError):
    """An agent version names a model (its own, a fallback, or its summaries') that the
    operator has not priced: no run of it could be served, so it is not published.
    ``models`` names them; the detail says how the operator prices each."""

    type = "unpriced_model"
    status = 422
    title = "Model not priced"


class RegionNotServed(TenantryError):
    """A tenant asked for a region no cell serves: on a cell, a region other than its own
    (an EU tenant's rows exist only in an EU cell: docs/how-to/cells.md); at the router, a region
    with no cell in the directory. ``region`` names it."""

    type = "region_not_served"
    status = 422
    title = "Region not served"


class CellUnavailable(TenantryError):
    """The tenant's home cell does not answer. ``cell`` names it; the router never sends
    the request to another cell (that cell has none of the tenant's data)."""

    type = "cell_unavailable"
    status = 503
    title = "Cell unavailable"
    retryable = True
