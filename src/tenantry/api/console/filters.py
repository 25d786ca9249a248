"""The console templates' environment and the filters its pages format values with."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import orjson
from jinja2 import Environment, PackageLoader, StrictUndefined, select_autoescape

MAX_SHOWN_JSON = 4096
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
    env = Environment(loader=PackageLoader(package, "templates"),
                      autoescape=select_autoescape(default=True, default_for_string=True),
                      undefined=StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    env.filters.update(usd=usd, ts=ts, pretty=pretty, whole=whole, compact=compact, ms=ms,
                       num=num)
    return env
