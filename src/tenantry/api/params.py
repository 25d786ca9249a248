"""Turning path, query and header text into typed values. An id that does not parse is
answered exactly like a missing resource: ids never reveal whether something exists."""

from __future__ import annotations

import re
from typing import TypeVar

from tenantry.api.fields import INT4_MAX
from tenantry.errors import NotFound, ValidationFailed

T = TypeVar("T")

# ASCII digits only: str.isdigit() also accepts '²' or '٣', which int() then refuses.
_DIGITS = re.compile(r"[0-9]{1,10}")


def parse_or_404(parse: type[T], text: str, detail: str) -> T:
    try:
        return parse.parse(text)  # type: ignore[attr-defined, no-any-return]
    except ValueError:
        raise NotFound(detail) from None


def int4(text: str) -> int | None:
    """``text`` as a non-negative integer that fits a Postgres ``integer``, else None."""
    if not _DIGITS.fullmatch(text):
        return None
    value = int(text)
    return value if value <= INT4_MAX else None


def positive_int4_or_404(text: str, detail: str) -> int:
    value = int4(text)
    if value is None or value < 1:
        raise NotFound(detail)
    return value


def seq_or_400(text: str, what: str) -> int:
    value = int4(text)
    if value is None:
        raise ValidationFailed(f"{what} must be an event seq (an integer 0-{INT4_MAX}).")
    return value


