"""How a table fits a terminal: ids whole on one line, always; the other columns folded,
then hidden (rightmost first) when the terminal is too narrow for them all, and a record
a row (a field and its value a line) when that would leave half of them or fewer.

An id is what a reader copies into the next command, so it is never wrapped, cut or
hidden: the row's first column (its identity), a column whose header ends in "id", and a
column whose values all look like ids (``run_<32 hex>``, ``ten_<26 base32>``, a UUID). A command
may say more with ``Column``: an id column that may be hidden first (a reference whose name
is shown beside it), or a column that is an id whatever it looks like. Commands that give
plain header strings get the same rule without saying anything."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

#: A table cell: text, or a count (thousands separators on a terminal, plain in a pipe).
Cell = str | int

_ID = re.compile(r"[a-z]{2,8}_[0-9a-z]{16,}|[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}")
# A text column folds down to this many characters before columns are hidden.
_NARROWEST_TEXT = 8
# The default box: a border before every column and after the last, and one space of
# padding either side of each cell.
_PER_COLUMN = 3


@dataclass(frozen=True, slots=True)
class Column:
    name: str
    #: Never wrapped or cut; None: decided from the header and the values.
    id: bool | None = None
    #: Hidden before the other columns when the terminal is narrow (an id too: say so only
    #: of a reference whose name another column shows).
    hide_first: bool = False


#: The time a row of a history happened: its first column, but not an id.
AT = Column("at (UTC)", id=False)


def column(spec: str | Column) -> Column:
    return spec if isinstance(spec, Column) else Column(spec)


def text(cell: Cell, *, terminal: bool) -> str:
    if isinstance(cell, int):
        return f"{cell:,}" if terminal else str(cell)
    return cell


def looks_like_id(value: str) -> bool:
    return bool(_ID.fullmatch(value))


def is_id(index: int, spec: Column, cells: Sequence[str]) -> bool:
    if spec.id is not None:
        return spec.id
    name = spec.name.lower().rstrip(" )")
    filled = [c for c in cells if c]
    return (index == 0 or name.endswith("id") or name.endswith("ids")
            or (bool(filled) and all(looks_like_id(c) for c in filled)))


@dataclass(frozen=True, slots=True)
class Layout:
    shown: list[int]  # the columns shown, in order
    widths: list[int]  # each shown column's width (without padding)
    nowrap: list[bool]  # each shown column's: an id column
    hidden: list[str]  # the names of the columns left out


def fit(specs: Sequence[Column], rows: Sequence[Sequence[str]], width: int) -> Layout | None:
    """The columns and their widths for a terminal ``width`` wide; None when the ids and
    more than half the columns do not fit (the caller prints a record a row instead)."""
    count = len(specs)
    cells = [[row[i] for row in rows] for i in range(count)]
    ids = [is_id(i, specs[i], cells[i]) for i in range(count)]
    natural = [max([len(specs[i].name), *map(len, cells[i])]) for i in range(count)]
    # Inside a text column an id (a field's value in a field/value table) keeps its width.
    longest_id = [max([len(c) for c in cells[i] if looks_like_id(c)], default=0)
                  for i in range(count)]
    least = [natural[i] if ids[i] else
             max(min(natural[i], _NARROWEST_TEXT), longest_id[i]) for i in range(count)]
    # Hidden first: what the command named, then the other text columns; rightmost first.
    # The first column and the other ids stay.
    order = ([i for i in reversed(range(1, count)) if specs[i].hide_first]
             + [i for i in reversed(range(1, count)) if not specs[i].hide_first
                and not ids[i]])
    # Every column whole if more than half of them fit so; else folded text, fewer hidden.
    shown = _keep(natural, order, width)
    if 2 * len(shown) <= count:
        shown = _keep(least, order, width)
    if _needed(least, shown) > width or 2 * len(shown) <= count:
        return None  # a table of little but ids: a record a row reads better
    widths = {i: least[i] for i in shown}
    spare = width - _needed(least, shown)
    for i in shown:  # widen the folded text columns, left to right, as far as there is room
        grow = min(spare, natural[i] - widths[i])
        widths[i] += grow
        spare -= grow
    return Layout(shown, [widths[i] for i in shown], [ids[i] for i in shown],
                  [specs[i].name for i in range(count) if i not in shown])


def _needed(widths: list[int], shown: list[int]) -> int:
    return sum(widths[i] for i in shown) + _PER_COLUMN * len(shown) + 1


def _keep(widths: list[int], order: list[int], width: int) -> list[int]:
    """The columns left when those in ``order`` are hidden one by one until ``widths``
    fit (or none is left to hide)."""
    shown = list(range(len(widths)))
    for hidden in order:
        if _needed(widths, shown) <= width:
            break
        shown.remove(hidden)
    return shown
