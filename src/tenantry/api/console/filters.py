"""The console templates' environment and the filters its pages format values with."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import orjson
from jinja2 import Environment, PackageLoader, StrictUndefined, select_autoescape

MAX_SHOWN_JSON = 4096


def usd(value: int | None) -> str:
    """Integer micro-dollars as dollars with all six decimals."""
    if value is None:
        return "—"
    sign = "-" if value < 0 else ""
    value = abs(value)
    return f"{sign}${value // 1_000_000:,}.{value % 1_000_000:06d}"


def ts(value: datetime | None) -> str:
    if value is None:
        return "—"
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S")


def pretty(value: Any) -> str:
    text = orjson.dumps(value, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS).decode()
    return text if len(text) <= MAX_SHOWN_JSON else text[:MAX_SHOWN_JSON] + "\n… (truncated)"


def compact(value: Any, limit: int = 160) -> str:
    text = orjson.dumps(value).decode()
    return text if len(text) <= limit else text[: limit - 1] + "…"


def ms(value: float) -> str:
    return f"{value / 1000:.2f} s" if value >= 1000 else f"{value:.1f} ms"


def environment() -> Environment:
    env = Environment(loader=PackageLoader("tenantry.api.console", "templates"),
                      autoescape=select_autoescape(default=True, default_for_string=True),
                      undefined=StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    env.filters.update(usd=usd, ts=ts, pretty=pretty, compact=compact, ms=ms)
    return env
