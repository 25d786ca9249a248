"""Keyset pagination, the same for every list route: ``limit`` and ``cursor`` in,
``{"data": [...], "next_cursor": ...}`` out.

A cursor is the key of the previous page's last item (an id or a name), handed back
unchanged: clients treat it as opaque. Each list states its key's pattern (the OpenAPI
document shows it), so a cursor that could not have come from that list is refused with
400 before any query runs, and any text of that pattern is a position in the list: the
page after it (empty past the end).
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Annotated, TypeVar

from fastapi import Query

from tenantry.api.params import PageLimit
from tenantry.errors import ValidationFailed

K = TypeVar("K")
T = TypeVar("T")
L = TypeVar("L")

DEFAULT_LIMIT = 50
MAX_LIMIT = 200
BAD_CURSOR = "cursor: not a cursor this API returned"


@dataclass(frozen=True, slots=True)
class PageRequest:
    limit: int
    cursor: str | None

    def position(self, parse: Callable[[str], K]) -> K | None:
        """The key to continue after (None: the first page). ``parse`` raises ValueError
        on text that is not a key of this list."""
        if self.cursor is None:
            return None
        try:
            return parse(self.cursor)
        except ValueError:
            raise ValidationFailed(BAD_CURSOR) from None

    def next_cursor(self, items: Sequence[T], key: Callable[[T], str]) -> str | None:
        """A full page may have more after it; a short one is the last."""
        return key(items[-1]) if items and len(items) >= self.limit else None

    def answer(self, shape: Callable[..., L], items: Sequence[T], out: Callable[[T], object],
               key: Callable[[T], str]) -> L:
        """A list route's answer: ``items`` as ``out`` shows each, and the cursor after
        them (``key`` of the last, on a full page)."""
        return shape(data=[out(item) for item in items],
                     next_cursor=self.next_cursor(items, key))


def keyed_by(pattern: str) -> Callable[..., Awaitable[PageRequest]]:
    """The ``limit`` and ``cursor`` of a list whose keys match ``pattern`` (its
    ``position`` parser must take every text of that pattern)."""

    async def page_request(
        limit: Annotated[PageLimit, Query(description="Items per page.")] = DEFAULT_LIMIT,
        # A default, not Annotated: the annotation is a string, and `pattern` is local.
        cursor: str | None = Query(
            None, max_length=256, pattern=pattern,
            description="`next_cursor` of the previous page: the key of its last item."),
    ) -> PageRequest:
        # async on purpose: FastAPI runs a plain-def dependency in a worker thread per
        # request.
        return PageRequest(limit, cursor)

    return page_request


def matching(pattern: str) -> Callable[[str], str]:
    """A parser for lists keyed by a name: the name itself, if it matches ``pattern``."""
    compiled = re.compile(pattern)

    def parse(text: str) -> str:
        if not compiled.fullmatch(text):
            raise ValueError("not a name of this list")
        return text

    return parse
