"""Structured logs: one JSON object per line when not on a terminal, plain text on one."""

from __future__ import annotations

import contextvars
import logging
import sys
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from tenantry.jsonutil import dumps

_STANDARD = set(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {"message", "asctime"}

#: Fields every log line of the current task carries (the run and tenant a worker task is
#: driving): set once with :func:`bind` at the top of the task, so the gateways' and the
#: sandboxes' lines in that task name the run without passing ids to every call. A task
#: gets a copy of its creator's context, so binding in one run's task never leaks into
#: another's.
_CONTEXT: contextvars.ContextVar[Mapping[str, str] | None] = contextvars.ContextVar(
    "tenantry_log_context", default=None)


def bind(**fields: str) -> None:
    """Add ``fields`` to every log line of the current task (and tasks it creates)."""
    _CONTEXT.set({**(_CONTEXT.get() or {}), **fields})


def context() -> Mapping[str, str]:
    return _CONTEXT.get() or {}


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key not in _STANDARD and not key.startswith("_") and key != "color_message":
                entry[key] = value if isinstance(value, str | int | float | bool) else str(value)
        for key, value in context().items():
            entry.setdefault(key, value)
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return dumps(entry).decode()


def configure(fmt: str = "auto", level: int = logging.INFO) -> None:
    use_json = fmt == "json" or (fmt == "auto" and not sys.stderr.isatty())
    handler = logging.StreamHandler(sys.stderr)
    text = logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
    handler.setFormatter(JsonFormatter() if use_json else text)
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    # One line per outbound HTTP request is noise at INFO; their warnings still show.
    for chatty in ("httpx2", "httpcore2", "mcp", "httpx", "httpcore"):
        logging.getLogger(chatty).setLevel(logging.WARNING)
