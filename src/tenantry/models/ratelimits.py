"""An account's remaining capacity, read from the rate-limit headers providers send on
every reply.

OpenAI (and servers that copy it) send ``x-ratelimit-remaining-requests``/``-tokens`` and
``x-ratelimit-reset-requests``/``-tokens`` as durations (``"1s"``, ``"6m0s"``, ``"20ms"``).
Anthropic sends ``anthropic-ratelimit-requests-remaining``/``-tokens-remaining`` (or
``-input-tokens-remaining``) and the matching ``-reset`` headers as RFC 3339 timestamps.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import UTC, datetime

from tenantry.models.types import RateLimitInfo

__all__ = ["format_duration", "parse_duration", "parse_rate_limits"]

_DURATION_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(h|ms|us|µs|ns|m|s)")
_UNIT_SECONDS = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6,
                 "ns": 1e-9}


def parse_rate_limits(
    provider: str, headers: Mapping[str, str], *, now: datetime | None = None
) -> RateLimitInfo | None:
    """The capacity ``headers`` report, or ``None`` when they carry no rate-limit header.

    ``provider`` names the wire format: ``"anthropic"`` reads Anthropic's headers, anything
    else OpenAI's (vLLM, Ollama and other OpenAI-compatible servers copy those). A header
    that cannot be read counts as absent. Anthropic's reset timestamps become seconds from
    ``now`` (default: the current time), never negative."""
    if provider == "anthropic":
        prefix = "anthropic-ratelimit-"
        tokens = ("tokens" if headers.get(prefix + "tokens-remaining") is not None
                  else "input-tokens")
        info = RateLimitInfo(
            remaining_requests=_int(headers.get(prefix + "requests-remaining")),
            remaining_tokens=_int(headers.get(f"{prefix}{tokens}-remaining")),
            reset_requests_seconds=_seconds_until(headers.get(prefix + "requests-reset"), now),
            reset_tokens_seconds=_seconds_until(headers.get(f"{prefix}{tokens}-reset"), now),
        )
    else:
        info = RateLimitInfo(
            remaining_requests=_int(headers.get("x-ratelimit-remaining-requests")),
            remaining_tokens=_int(headers.get("x-ratelimit-remaining-tokens")),
            reset_requests_seconds=parse_duration(headers.get("x-ratelimit-reset-requests")),
            reset_tokens_seconds=parse_duration(headers.get("x-ratelimit-reset-tokens")),
        )
    return None if info == RateLimitInfo() else info


def parse_duration(text: str | None) -> float | None:
    """Seconds in a Go-style duration (``"1h2m3.5s"``, ``"20ms"``) or a bare number of
    seconds; ``None`` if ``text`` is neither."""
    if text is None:
        return None
    text = text.strip()
    try:
        value = float(text)
    except ValueError:
        pass
    else:
        return value if value >= 0 else None
    parts = _DURATION_PART.findall(text)
    if not parts or "".join(number + unit for number, unit in parts) != text:
        return None
    return sum(float(number) * _UNIT_SECONDS[unit] for number, unit in parts)


def format_duration(seconds: float) -> str:
    """The Go-style duration OpenAI sends for ``seconds`` (``"20ms"``, ``"1.5s"``,
    ``"6m0s"``, ``"1h2m3s"``); :func:`parse_duration` reads it back."""
    if seconds < 1:
        return f"{round(seconds * 1000)}ms"
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    text = f"{round(secs, 3):g}s"
    if hours or minutes:
        text = f"{int(minutes)}m{text}"
    if hours:
        text = f"{int(hours)}h{text}"
    return text


def _int(text: str | None) -> int | None:
    if text is None:
        return None
    try:
        value = int(text.strip())
    except ValueError:
        return None
    return value if value >= 0 else None


def _seconds_until(text: str | None, now: datetime | None) -> float | None:
    if text is None:
        return None
    try:
        when = datetime.fromisoformat(text.strip())
    except ValueError:
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - (now or datetime.now(UTC))).total_seconds())
