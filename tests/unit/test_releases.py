"""Releases and the compatibility window (db/release.py): release N's processes run on
release N+1's schema; compared by major.minor; a new major serves only itself."""

from __future__ import annotations

import pytest

from tenantry.db.release import Connected, Fleet, Release, served_text, serves


def r(text: str) -> Release:
    return Release.parse(text)


@pytest.mark.parametrize(("text", "numbers"), [
    ("0.2.0", (0, 2, 0)), ("1.4", (1, 4, 0)), ("0.10.3rc1", (0, 10, 3)), (" 2.0.1 ", (2, 0, 1)),
])
def test_a_release_is_read_from_its_version(text: str, numbers: tuple[int, int, int]) -> None:
    release = r(text)
    assert (release.major, release.minor, release.patch) == numbers
    assert str(release) == text.strip()


@pytest.mark.parametrize("text", ["", "v0.2.0", "0", "zero.two", "0.2.0 beta"])
def test_what_is_not_a_release_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="not a release"):
        r(text)


def test_releases_order_by_their_numbers() -> None:
    assert r("0.10.0") > r("0.9.7") > r("0.9.1")
    assert r("0.2") == r("0.2.0")
    assert max([r("0.2.1"), r("0.10.0"), r("0.3.0")]) == r("0.10.0")


@pytest.mark.parametrize(("schema", "process", "served"), [
    ("0.2.0", "0.1.0", True),  # the previous release runs on the next one's schema
    ("0.2.0", "0.1.7", True),
    ("0.2.3", "0.2.0", True),  # a patch release changes nothing the schema serves
    ("0.3.0", "0.1.0", False),  # two releases behind
    ("0.1.0", "0.2.0", False),  # a schema older than the process needs
    ("1.0.0", "0.9.0", False),  # a new major serves only itself
    ("1.1.0", "1.0.4", True),
])
def test_the_window(schema: str, process: str, served: bool) -> None:
    assert serves(r(schema), r(process)) is served


def test_what_a_schema_serves_is_said_in_lines() -> None:
    assert served_text(r("0.2.0")) == "0.1 and 0.2"
    assert served_text(r("1.0.2")) == "1.0"


@pytest.mark.parametrize(("name", "release"), [
    ("tenantry/0.2.0", "0.2.0"),
    ("tenantry/0.3.1 event hub", "0.3.1"),
    ("tenantry/0.2.0 migrate", "0.2.0"),
    ("tenantry event hub", "0.1.0"),  # 0.1.0's hub named no release
    ("psql", None), ("", None), (None, None), ("tenantry/garbage", None),
])
def test_a_connection_names_its_release(name: str | None, release: str | None) -> None:
    found = Release.of_application(name)
    assert (str(found) if found is not None else None) == release


def test_the_fleet_counts_connections_and_workers_by_release_newest_first() -> None:
    fleet = Fleet.of(
        [("tenantry/0.2.0", 5), ("tenantry/0.2.0 event hub", 1), ("tenantry/0.1.0", 3),
         ("tenantry event hub", 1), ("psql", 2), (None, 1)],
        [("0.1.0", 2), ("0.2.0", 1), ("0.0.9", 1)])
    assert fleet.releases == (Connected(r("0.2.0"), 6, 1), Connected(r("0.1.0"), 4, 2),
                              Connected(r("0.0.9"), 0, 1))
    assert fleet.other == 3
    assert fleet.describe() == (
        "0.2.0 (6 connection(s), 1 worker(s)); 0.1.0 (4 connection(s), 2 worker(s)); "
        "0.0.9 (1 worker(s)); 3 other connection(s) naming no Tenantry release")
    assert [c.release for c in fleet.older_than((0, 2))] == [r("0.1.0"), r("0.0.9")]
    assert Fleet.of([], []).describe() == "nothing"
