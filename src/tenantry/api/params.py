"""Turning path, query and header text into typed values. An id that does not parse is
answered exactly like a missing resource: ids never reveal whether something exists.

Every integer read from a path, query or header is ASCII digits and nothing else (`Digits`
for declared parameters, `int4` for text read by hand): pydantic's lax int also takes
'+1', ' 1', '1_0', '-0' and '1.0', and int() takes '١٢'."""

from __future__ import annotations

import re
from typing import Annotated, Any, TypeVar

from fastapi import Header
from pydantic import BeforeValidator, Field

from tenantry.api.fields import INT4_MAX
from tenantry.errors import NotFound

T = TypeVar("T")

# ASCII digits only: str.isdigit() also accepts '²' or '٣', which int() then refuses. At
# most 19 digits (a bigint's): longer text is refused before int() reads it.
_DIGITS = re.compile(r"[0-9]{1,19}")


def parse_or_404(parse: type[T], text: str, detail: str) -> T:
    try:
        return parse.parse(text)  # type: ignore[attr-defined, no-any-return]
    except ValueError:
        raise NotFound(detail) from None


def ascii_int(text: str) -> int | None:
    """``text`` as a non-negative integer if it is 1-19 ASCII digits, else None."""
    return int(text) if _DIGITS.fullmatch(text) else None


def int4(text: str) -> int | None:
    """``text`` as a non-negative integer that fits a Postgres ``integer``, else None."""
    value = ascii_int(text)
    return value if value is not None and value <= INT4_MAX else None


def _ascii_digits(value: object) -> object:
    if isinstance(value, str):
        parsed = ascii_int(value)
        if parsed is None:
            raise ValueError("must be a whole number in ASCII digits (0-9), no sign or space")
        return parsed
    return value


# The integer query parameters and headers: ASCII digits, then the bounds in the type, so
# the OpenAPI document shows them. Declare them as ``Annotated[Seq, Query(...)] = default``:
# FastAPI drops the validator of a type whose default is ``Query(...)`` itself.
#: An event seq (``run_events.seq`` is an ``integer``): where a stream or page resumes.
Seq = Annotated[int, Field(ge=0, le=INT4_MAX), BeforeValidator(_ascii_digits)]
#: How many of a group to show (each tenant's oldest pending approvals).
FewLimit = Annotated[int, Field(ge=1, le=50), BeforeValidator(_ascii_digits)]
#: A page size of the list routes.
PageLimit = Annotated[int, Field(ge=1, le=200), BeforeValidator(_ascii_digits)]
#: A page size of the long lists (an event page, a price history).
LongPageLimit = Annotated[int, Field(ge=1, le=1000), BeforeValidator(_ascii_digits)]


def positive_int4_or_404(text: str, detail: str) -> int:
    value = int4(text)
    if value is None or value < 1:
        raise NotFound(detail)
    return value


def idempotency_header(description: str) -> Any:
    """The ``Idempotency-Key`` header of a route that creates something: printable ASCII
    (no space), 1-255 characters; ``description`` says what a retry with it returns."""
    return Header(None, min_length=1, max_length=255, pattern=r"^[\x21-\x7e]+$",
                  description=description)
