"""What the client raises: the platform's problem+json answers as typed exceptions.

Every exception here is a :class:`ClientError`, itself a
:class:`tenantry.errors.TenantryError` — the same root the platform's own errors have, with
the same fields meaning the same things (``type``, ``status``, ``title``, ``detail``,
``extra``, ``retryable``). On an :class:`ApiError` they are the answer's own: ``type`` and
``status`` come from the wire (``Overloaded`` is a 503 from ``POST /v1/runs`` and a 429 from
a capped event stream), and ``problem`` holds the whole problem document.

``retryable`` keeps the platform's meaning — the same request may work later — which is
not the same as "the client retries it by itself": it retries only the transient refusals
(:data:`RETRIED_TYPES`, and any 503); a ``QuotaExceeded`` is retryable in the platform's
sense but waits on the tenant's own runs ending, so the client hands it to the caller at
once (docs/how-to/client-sdk.md#retries).
"""

from __future__ import annotations

import email.utils
import time
from collections.abc import Mapping
from typing import Any, ClassVar

import orjson

from tenantry import errors as platform_errors
from tenantry.errors import TenantryError

__all__ = [
    "AdmissionsPaused",
    "ApiError",
    "BudgetExhausted",
    "CellUnavailable",
    "ClientError",
    "ConfigError",
    "Conflict",
    "ConnectionFailed",
    "DatabaseUnavailable",
    "Forbidden",
    "NotFound",
    "Overloaded",
    "PayloadTooLarge",
    "QuotaExceeded",
    "ServerError",
    "TenantErased",
    "TenantMoving",
    "ToolServerUrlRefused",
    "Unauthorized",
    "Unavailable",
    "ValidationError",
    "WaitTimeout",
]

#: Problem types the client retries by itself (when the call is safe to repeat): the
#: platform refused for a moment and says how long to wait. Any 503 is retried too.
RETRIED_TYPES = frozenset({"overloaded", "database_unavailable", "tenant_moving",
                           "cell_unavailable"})
#: Refusals that end only when the tenant's own state changes: never retried blindly.
NOT_RETRIED_TYPES = frozenset({"quota_exceeded", "budget_exhausted"})


class ClientError(TenantryError):
    """Root of everything ``tenantry.client`` raises."""

    type: ClassVar[str] = "client_error"
    status: ClassVar[int] = 0
    title: ClassVar[str] = "Client error"


class ConfigError(ClientError, ValueError):
    """The client cannot be built as asked (no API key, no base URL)."""

    type = "configuration_error"
    title = "Invalid client configuration"


class ConnectionFailed(ClientError):
    """No answer from the platform: connecting, sending or reading failed, on every attempt
    the client was allowed (``__cause__`` is the last transport error)."""

    type = "connection_failed"
    title = "The platform could not be reached"
    retryable = True


class WaitTimeout(ClientError, TimeoutError):
    """``runs.wait`` gave up before the run reached the status asked for; ``run`` is the
    run as last read (None when it was never read) — for ``evaluations.wait`` and
    ``exports.wait``, the evaluation or export as last read."""

    type = "timeout"
    title = "Timed out"

    def __init__(self, detail: str = "", run: Any = None) -> None:
        super().__init__(detail)
        self.run = run


class ApiError(ClientError):
    """An answer that is not a success: the platform's problem+json, or any other error
    response (a proxy's, say) read as well as it can be.

    ``status``, ``type``, ``title``, ``detail`` are the answer's; ``retry_after`` the
    seconds its ``Retry-After`` asked for (None without one); ``problem`` the whole
    document; ``extra`` its fields beyond the standard four (``errors``, ``run_id``,
    ``limit``, ``shed``, ...)."""

    type = "http_error"
    title = "HTTP error"

    def __init__(self, status: int, problem: Mapping[str, Any], *,
                 retry_after: float | None = None) -> None:
        detail = str(problem.get("detail") or problem.get("title") or f"HTTP {status}")
        super().__init__(detail)
        # The answer's own status and type: the class gives defaults, the wire the facts.
        self.status = status  # type: ignore[misc]
        self.type = str(problem.get("type") or type(self).type)  # type: ignore[misc]
        self.title = str(problem.get("title") or type(self).title)  # type: ignore[misc]
        self.problem: dict[str, Any] = dict(problem)
        self.extra = {k: v for k, v in problem.items()
                      if k not in ("type", "title", "status", "detail")}
        self.retry_after = retry_after

    def __str__(self) -> str:
        return f"{self.status} {self.type}: {self.detail}"

    def __repr__(self) -> str:
        return f"{type(self).__name__}(status={self.status}, type={self.type!r}, " \
               f"detail={self.detail!r})"


class ValidationError(ApiError, problem=platform_errors.ValidationFailed):
    """400 ``validation_error``: ``errors`` (in ``extra``) names the fields."""

    @property
    def errors(self) -> list[dict[str, Any]]:
        found = self.extra.get("errors")
        return list(found) if isinstance(found, list) else []


class Unauthorized(ApiError, problem=platform_errors.Unauthorized):
    pass


class NotFound(ApiError, problem=platform_errors.NotFound):
    """404: missing, ill-formed, or another tenant's: the platform never says which."""


class Forbidden(ApiError, problem=platform_errors.Forbidden):
    """403: the API key lacks the scope the call needs (``extra['scope']`` names it)."""


class Conflict(ApiError, problem=platform_errors.Conflict):
    """409: e.g. an Idempotency-Key reused with another body (``extra['run_id']``), a
    decision on an approval already decided, a version number already taken."""


class ToolServerUrlRefused(ApiError):
    """422: the operator's rules refuse a tool server URL the tenant registers (not https,
    a host not allowed, or a name that resolves to a loopback, private, link-local or
    metadata address); ``detail`` says which, ``extra['field']`` is ``url``. The class
    the platform raises is the server's (tools/destinations.py): declared here by its
    type, so the client imports nothing of the server."""

    type = "tool_server_url_refused"
    status = 422
    title = "Tool server URL refused"


class TenantErased(Conflict, problem=platform_errors.TenantErased):
    pass


class AdmissionsPaused(Conflict, problem=platform_errors.AdmissionsPaused):
    pass


class PayloadTooLarge(ApiError, problem=platform_errors.PayloadTooLarge):
    pass


class QuotaExceeded(ApiError, problem=platform_errors.QuotaExceeded):
    """429: the tenant has its ``max_queued`` runs not yet ended. Not retried by the client:
    it ends when some of the tenant's runs end, not after a delay."""


class BudgetExhausted(ApiError, problem=platform_errors.BudgetExhausted):
    """429: the tenant's monthly spend cap is reached. Not retried."""


class Unavailable(ApiError):
    """503: the platform cannot serve this now; retried by the client (safe calls) after
    ``retry_after`` seconds, and raised once its attempts or deadline are spent."""

    type = "unavailable"
    status = 503
    title = "Service unavailable"
    retryable = True


class Overloaded(Unavailable, problem=platform_errors.Overloaded):
    """The cell sheds new runs (503, ``extra['shed']``), or this tenant or API process has
    as many event streams open as it serves (429)."""


class DatabaseUnavailable(Unavailable, problem=platform_errors.DatabaseUnavailable):
    pass


class TenantMoving(Unavailable, problem=platform_errors.TenantMoving):
    pass


class CellUnavailable(Unavailable, problem=platform_errors.CellUnavailable):
    pass


class ServerError(ApiError, problem=TenantryError):
    """Any other 5xx (``internal_error``, ``vault_error``, a proxy's 502 ...)."""


_BY_TYPE: dict[str, type[ApiError]] = {
    cls.type: cls for cls in (
        ValidationError, Unauthorized, Forbidden, NotFound, Conflict, TenantErased,
        AdmissionsPaused, PayloadTooLarge, QuotaExceeded, BudgetExhausted, Overloaded,
        DatabaseUnavailable, TenantMoving, CellUnavailable, ToolServerUrlRefused,
    )
}
_BY_STATUS: dict[int, type[ApiError]] = {
    400: ValidationError, 401: Unauthorized, 403: Forbidden, 404: NotFound, 409: Conflict,
    413: PayloadTooLarge, 503: Unavailable,
}


def parse_retry_after(value: str | None, *, now: float | None = None) -> float | None:
    """``Retry-After`` as seconds from now: delta-seconds or an HTTP date; None when absent
    or unreadable. Never negative."""
    if value is None:
        return None
    text = value.strip()
    try:
        return max(0.0, float(text))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


def problem_of(status: int, content_type: str, body: bytes) -> dict[str, Any]:
    """The problem document of an error answer; a stand-in for an answer that has none
    (an HTML page from a proxy, an empty body)."""
    if "json" in content_type:
        try:
            parsed = orjson.loads(body)
        except orjson.JSONDecodeError:
            parsed = None
        if isinstance(parsed, dict):
            return parsed
    text = body[:500].decode("utf-8", "replace").strip()
    return {"type": "http_error", "title": f"HTTP {status}", "status": status,
            "detail": text or f"HTTP {status}"}


def error_for(status: int, headers: Mapping[str, str], body: bytes) -> ApiError:
    """The typed exception for an error answer: by its problem ``type``, else its status."""
    problem = problem_of(status, headers.get("content-type", ""), body)
    retry_after = parse_retry_after(headers.get("retry-after"))
    if retry_after is None and isinstance(problem.get("retry_after"), int | float):
        retry_after = float(problem["retry_after"])
    kind = _BY_TYPE.get(str(problem.get("type")))
    if kind is None:
        kind = _BY_STATUS.get(status) or (ServerError if status >= 500 else ApiError)
    return kind(status, problem, retry_after=retry_after)
