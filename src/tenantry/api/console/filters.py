"""The console templates' environment and the filters its pages format values with."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import orjson
from jinja2 import ChoiceLoader, Environment, PackageLoader, StrictUndefined, select_autoescape

MAX_SHOWN_JSON = 4096
MAX_SHOWN_TEXT = 65536  # a run's answer or input: all of an input (the API caps it at 64 KiB)
NO_DATA = "—"


def usd(value: int | None) -> str:
    """Integer micro-dollars as dollars with all six decimals."""
    if value is None:
        return NO_DATA
    sign = "-" if value < 0 else ""
    value = abs(value)
    return f"{sign}${value // 1_000_000:,}.{value % 1_000_000:06d}"


def ts(value: datetime | None) -> str:
    if value is None:
        return NO_DATA
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S")


def pretty(value: Any) -> str:
    text = whole(value)
    return text if len(text) <= MAX_SHOWN_JSON else text[:MAX_SHOWN_JSON] + "\n… (truncated)"


def readable(value: Any, limit: int = MAX_SHOWN_TEXT) -> str:
    """A run's answer (or input) as a person reads it: a string as its text, newlines and
    all, never as a quoted JSON string with escapes; anything else as indented JSON."""
    text = value if isinstance(value, str) else whole(value)
    return text if len(text) <= limit else text[:limit] + "\n… (truncated)"


def decider(value: str | None) -> str:
    """Who decided an approval, from the ``decided_by`` its ApprovalDecided event names."""
    if value is None:
        return "not recorded"
    kind, _, ident = value.partition(":")
    return {"operator": "the platform operator", "user": f"user {ident}",
            "key": f"API key {ident}"}.get(kind, value)


def whole(value: Any) -> str:
    """Indented JSON, all of it: for an event's data, which the log caps at 8 KiB."""
    return orjson.dumps(value, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS).decode()


def compact(value: Any, limit: int = 160) -> str:
    text = orjson.dumps(value).decode()
    return text if len(text) <= limit else text[: limit - 1] + "…"


# A figure with no data reads "—", never 0: a pool that never handed out a sandbox has no
# last claim time, which "0.0 ms" would claim was instant.
def ms(value: float | None) -> str:
    if value is None:
        return NO_DATA
    return f"{value / 1000:.2f} s" if value >= 1000 else f"{value:.1f} ms"


def num(value: float | None, spec: str = ",") -> str:
    """A count or amount with thousands separators (``spec``: a format spec)."""
    return NO_DATA if value is None else format(value, spec)


def environment(package: str = "tenantry.api.console") -> Environment:
    """The templates of ``package`` (its ``templates/`` folder) with these filters: the
    operator console's by default, the tenant console's (api/tenant_console/) too."""
    # The operator console's templates stand behind another package's: the partials both
    # consoles show (an approval's context and decision) are written once.
    loader = ChoiceLoader([PackageLoader(package, "templates"),
                           PackageLoader("tenantry.api.console", "templates")])
    env = Environment(loader=loader,
                      autoescape=select_autoescape(default=True, default_for_string=True),
                      undefined=StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    env.filters.update(usd=usd, ts=ts, pretty=pretty, whole=whole, compact=compact, ms=ms,
                       num=num, readable=readable, decider=decider)
    return env
