"""Named SQL blocks loaded once from ``.sql`` files.

A file holds blocks introduced by ``-- name: <identifier>``; everything up to the next
``-- name:`` is that query. SQL never comes from user input: requests choose *which* named
query runs, never its text.
"""

from __future__ import annotations

import re
from importlib import resources

_NAME = re.compile(r"^--\s*name:\s*([a-z_][a-z0-9_]*)\s*$", re.MULTILINE)


class Queries:
    """Attribute access to a file's named queries: ``q.insert_run``."""

    def __init__(self, blocks: dict[str, str]) -> None:
        self._blocks = blocks

    def __getattr__(self, name: str) -> str:
        try:
            return self._blocks[name]
        except KeyError:
            raise AttributeError(f"no query named {name!r}") from None

    def names(self) -> list[str]:
        return sorted(self._blocks)


def parse(text: str) -> dict[str, str]:
    parts = _NAME.split(text)
    blocks: dict[str, str] = {}
    # parts = [preamble, name1, body1, name2, body2, ...]
    for name, body in zip(parts[1::2], parts[2::2], strict=True):
        if name in blocks:
            raise ValueError(f"query {name!r} is defined twice")
        sql = body.strip().rstrip(";").strip()
        if not sql:
            raise ValueError(f"query {name!r} is empty")
        blocks[name] = sql
    return blocks


def load(package: str, filename: str = "queries.sql") -> Queries:
    """Load ``filename`` that sits beside the modules of ``package``."""
    text = resources.files(package).joinpath(filename).read_text(encoding="utf-8")
    return Queries(parse(text))
