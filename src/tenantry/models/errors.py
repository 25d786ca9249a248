"""What can go wrong calling a model provider, typed by what the gateway should do next.

The failure ladder (models/gateway.py) branches on these classes only:

- :class:`ModelUnavailable` and subclasses — try again (same account, with backoff), then
  another account: network errors, 5xx, 529, 408, 409, and a body we cannot read;
- :class:`RateLimited` — the account is busy (429): wait ``retry_after`` or move on;
- :class:`AccountUnusable` — this account cannot serve the request at all (401, 403, 404:
  bad key, no access to the model): never retried on it, other accounts may work;
- :class:`ModelRefused` — the request itself is refused (400, 413, 422): every account would
  say the same, so the run is told instead of the ladder being climbed.

At the end of the ladder, :class:`ModelsExhausted` tells the engine to park the run.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from tenantry.errors import TenantryError


class ModelError(TenantryError):
    type = "model_error"
    status = 502
    title = "Model provider error"

    @property
    def retry_after(self) -> float | None:
        value = self.extra.get("retry_after")
        return float(value) if isinstance(value, int | float) else None

    @property
    def http_status(self) -> int | None:
        value = self.extra.get("http_status")
        return int(value) if isinstance(value, int) else None


class ModelUnavailable(ModelError):
    type = "model_unavailable"
    status = 503
    title = "Model provider unavailable"
    retryable = True


class RateLimited(ModelUnavailable):
    type = "model_rate_limited"
    title = "Model provider rate limit reached"


class MalformedReply(ModelUnavailable):
    """The provider answered, but not with a completion we can read."""

    type = "model_malformed_reply"
    title = "Model provider sent a malformed reply"


class AccountUnusable(ModelUnavailable):
    """Credentials or access are wrong for this account; another account may serve."""

    type = "model_account_unusable"
    title = "Model account cannot serve this request"


class ModelsExhausted(ModelUnavailable):
    """No account of the run's model (or its opted-in fallbacks) can answer now."""

    type = "model_unavailable"
    title = "No model account can serve this run now"

    # Set by the gateway that raised it (see recovered_since).
    _recovered: Callable[[], bool] | None = None

    def recovered_since(self) -> bool:
        """Whether an account recovered while this call was failing. Its wake-up may have
        gone out before this run's park was written, and missed it: the run must then
        wake the runs parked on its models itself, once parked."""
        return self._recovered is not None and self._recovered()


class ModelRefused(ModelError):
    type = "model_refused"
    status = 502
    title = "Model provider refused the request"


MAX_RETRY_AFTER_SECONDS = 300.0


def parse_retry_after(headers: Mapping[str, str]) -> float | None:
    """Seconds to wait from ``retry-after-ms`` or ``retry-after`` (seconds form), capped.
    (An HTTP-date ``Retry-After`` is ignored: providers send seconds.)"""
    for name, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
        raw = headers.get(name)
        if raw is None:
            continue
        try:
            value = float(raw) * scale
        except ValueError:
            continue
        if value >= 0:
            return min(value, MAX_RETRY_AFTER_SECONDS)
    return None


def error_for_status(status: int, headers: Mapping[str, str], body: str) -> ModelError:
    """The typed error for a non-2xx provider answer."""
    detail = f"provider answered {status}: {body[:300]}"
    fields = {"http_status": status, "retry_after": parse_retry_after(headers)}
    if status == 429:
        return RateLimited(detail, **fields)
    if status in (401, 403, 404):
        return AccountUnusable(detail, **fields)
    if status in (408, 409) or status >= 500:
        return ModelUnavailable(detail, **fields)
    return ModelRefused(detail, **fields)


def probe_tells_nothing(error: ModelError) -> bool:
    """Whether a failed probe (``GET …/models``) is no evidence that the account is failing.

    The probe endpoint is optional: a provider may not have it (404, 405, 501), or not let
    this key use it (401, 403: a key scoped to completions only), or be busy (429). Only a
    server that does not answer, or answers 408, 409 or 5xx, counts as failing; anything
    else leaves the verdict to a real call (ADR 0009)."""
    status = error.http_status
    if status is None:
        return False  # no answer at all: the network, a timeout, a body we could not read
    failing = status in (408, 409) or (status >= 500 and status != 501)
    return not failing
