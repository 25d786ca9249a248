"""Turning path and query text into typed ids. An id that does not parse is answered
exactly like a missing resource: ids never reveal whether something exists."""

from __future__ import annotations

from typing import TypeVar

from tenantry.errors import NotFound

T = TypeVar("T")


def parse_or_404(parse: type[T], text: str, detail: str) -> T:
    try:
        return parse.parse(text)  # type: ignore[attr-defined, no-any-return]
    except ValueError:
        raise NotFound(detail) from None
