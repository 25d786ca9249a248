"""Releases, and which of them may share a database (docs/how-to/upgrade.md).

The compatibility window: release N's API and workers run on release N+1's schema, and
N+1's workers take over N's runs, so a rolling upgrade migrates first, then replaces the
processes one at a time. Releases are compared by major.minor: a patch release never
changes what the schema serves. The release before ``X.Y`` is ``X.(Y-1)``; a new major
(``X.0``) names no predecessor it is sure of, so its schema serves only itself (stop the
older fleet before migrating to it).

Every connection of a process names its release in ``application_name``
(``tenantry/<version>``, :data:`tenantry.db.pool.APPLICATION_NAME`), and every worker in
``worker_sessions.release``: that is how the database knows who is connected."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

_VERSION = re.compile(r"^(\d+)\.(\d+)(?:\.(\d+))?([0-9A-Za-z.+-]*)$")
_APPLICATION = re.compile(r"^tenantry/(\S+)")

#: Every release before databases recorded theirs (``schema_releases``, worker_sessions'
#: ``release``): 0.1.0 is everything before the first tagged release.
FIRST = "0.1.0"
#: What processes of before the release named their connections to the event hub, with no
#: release: only 0.1.0's did (later ones say ``tenantry/<version> event hub``).
_UNVERSIONED = {"tenantry event hub": FIRST}

Line = tuple[int, int]


@dataclass(frozen=True, slots=True, order=True)
class Release:
    major: int
    minor: int
    patch: int
    text: str = field(compare=False)

    @classmethod
    def parse(cls, text: str) -> Release:
        match = _VERSION.match(text.strip())
        if match is None:
            raise ValueError(f"not a release: {text!r} (major.minor.patch)")
        return cls(int(match[1]), int(match[2]), int(match[3] or 0), text.strip())

    @classmethod
    def of_application(cls, name: str | None) -> Release | None:
        """The release a connection's ``application_name`` names; None: not a Tenantry
        process (or not one that names its release)."""
        if not name:
            return None
        if name in _UNVERSIONED:
            return cls.parse(_UNVERSIONED[name])
        match = _APPLICATION.match(name)
        if match is None:
            return None
        try:
            return cls.parse(match[1])
        except ValueError:
            return None

    @property
    def line(self) -> Line:
        return (self.major, self.minor)

    def __str__(self) -> str:
        return self.text


def line_text(line: Line) -> str:
    return f"{line[0]}.{line[1]}"


def previous_line(line: Line) -> Line | None:
    """The release line before ``line``, or None at a new major (see the module)."""
    return (line[0], line[1] - 1) if line[1] > 0 else None


def served_lines(schema: Release) -> list[Line]:
    """The release lines whose processes run on ``schema``'s schema: its own and the one
    before it."""
    before = previous_line(schema.line)
    return [before, schema.line] if before is not None else [schema.line]


def serves(schema: Release, process: Release) -> bool:
    return process.line in served_lines(schema)


def served_text(schema: Release) -> str:
    return " and ".join(line_text(line) for line in served_lines(schema))


def oldest_served(schema: Release) -> Line:
    return served_lines(schema)[0]


@dataclass(frozen=True, slots=True)
class Connected:
    """One release's share of what is connected to a database."""

    release: Release
    connections: int = 0  # sessions naming it in application_name
    workers: int = 0  # live worker sessions (worker_sessions) of it

    def describe(self) -> str:
        parts = [f"{self.connections} connection(s)"] if self.connections else []
        if self.workers:
            parts.append(f"{self.workers} worker(s)")
        return f"{self.release} ({', '.join(parts)})"


@dataclass(frozen=True, slots=True)
class Fleet:
    """What is connected to a database, by release, newest first; ``other``: sessions that
    name no Tenantry release (psql, a monitor, a backup, or a process of 0.1.0 from before
    it named its connections — its worker sessions still say 0.1.0)."""

    releases: tuple[Connected, ...]
    other: int = 0

    @classmethod
    def of(cls, connections: Iterable[tuple[str | None, int]],
           workers: Iterable[tuple[str, int]]) -> Fleet:
        """From ``(application_name, sessions)`` and ``(worker release, live workers)``."""
        sessions: dict[Release, int] = {}
        live: dict[Release, int] = {}
        other = 0
        for name, count in connections:
            release = Release.of_application(name)
            if release is None:
                other += count
            else:
                sessions[release] = sessions.get(release, 0) + count
        for text, count in workers:
            try:
                release = Release.parse(text)
            except ValueError:  # a worker that registered something odd: counted, unnamed
                other += count
                continue
            live[release] = live.get(release, 0) + count
        # Releases are equal by their numbers: "0.2.0" and "0.2" are one release.
        found = {r: r for r in [*sessions, *live]}
        return cls(tuple(Connected(r, sessions.get(r, 0), live.get(r, 0))
                         for r in sorted(found.values(), reverse=True)), other)

    def older_than(self, line: Line) -> list[Connected]:
        return [c for c in self.releases if c.release.line < line]

    def describe(self) -> str:
        shown = [c.describe() for c in self.releases]
        if self.other:
            shown.append(f"{self.other} other connection(s) naming no Tenantry release")
        return "; ".join(shown) or "nothing"


def describe_all(connected: list[Connected]) -> str:
    return "; ".join(c.describe() for c in connected)
