"""The one pagination rule every list route follows."""

from __future__ import annotations

import pytest

from tenantry.api.pagination import PageRequest, matching
from tenantry.errors import ValidationFailed
from tenantry.ids import RunId


def test_a_full_page_has_a_cursor_and_a_short_one_does_not() -> None:
    page = PageRequest(limit=2, cursor=None)
    assert page.next_cursor(["a", "b"], str.upper) == "B"
    assert page.next_cursor(["a"], str.upper) is None
    assert page.next_cursor([], str.upper) is None


def test_the_cursor_is_parsed_as_the_lists_own_key() -> None:
    run = RunId.new()
    assert PageRequest(50, None).position(RunId.parse) is None
    assert PageRequest(50, str(run)).position(RunId.parse) == run
    for bad in ("garbage", f"agt_{run.uuid.hex}"):
        with pytest.raises(ValidationFailed, match="cursor"):
            PageRequest(50, bad).position(RunId.parse)


def test_name_cursors_match_the_whole_name() -> None:
    names = matching(r"^[a-z0-9-]{1,8}$")
    assert PageRequest(50, "bank-1").position(names) == "bank-1"
    for bad in ("bank-1\n", "a\x00b", "UPPER", "much-too-long"):
        with pytest.raises(ValidationFailed):
            PageRequest(50, bad).position(names)
