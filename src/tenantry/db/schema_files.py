"""A schema's files, as the code carries them (ADR 0037): numbered migrations (DDL history),
routines (one file per function, trigger function or view: the source of truth) and
contract steps, read and checked without a database. :mod:`tenantry.db.migrate` applies
them; ``tenantry migrate --status`` compares them with what a database recorded.

A routine file's directives (``-- requires: other``, ``-- phase: early``, ``-- retires:
name``) order it among the others, apply it before the migrations, or retire what a
contract step removed; a function a migration drops and no routine defines again is refused
here (a routine left behind would be recreated by no one)."""

from __future__ import annotations

import hashlib
import heapq
import re
from dataclasses import dataclass
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Literal, TypeVar

from tenantry.errors import ConfigurationError

_FILE = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")
_ROUTINE_FILE = re.compile(r"^([a-z0-9_]+)\.sql$")
#: Migrations rewritten in place, with the sha256 of the text a database may have applied.
_REWRITTEN = "rewritten.txt"


@dataclass(frozen=True, slots=True)
class Schema:
    """One series of migrations and routines: where their files are (a package name, or a
    directory), where a database records them, and the advisory lock that serialises two
    processes migrating it at once."""

    package: str | Path
    record_table: str
    lock_key: int
    routines: str | Path | None = None
    routine_table: str = "schema_routines"
    #: Where the releases that migrated the database are recorded; None: not recorded,
    #: and no window is kept (the directory of cells: its processes are routers).
    release_table: str | None = None
    contract: str | Path | None = None
    contract_table: str = "schema_contract_steps"


# Any lock constant works; it only has to be the same for every Tenantry process.
CELL = Schema("tenantry.db.migrations", "schema_migrations", 0x7E_4A_47_12,
              routines="tenantry.db.routines", release_table="schema_releases",
              contract="tenantry.db.contract")


@dataclass(frozen=True, slots=True)
class Migration:
    version: int
    name: str
    sql: str

    @property
    def sha256(self) -> str:
        return _sha256(self.sql)

    @property
    def label(self) -> str:
        return f"{self.version:04d}_{self.name}"

    @property
    def retires(self) -> tuple[str, ...]:
        """The routines whose objects this step drops, named in its leading comment
        (``-- retires: name, name``): their files are gone, and their records go with the
        step. Until then a record without a file is a routine this code knows."""
        return tuple(_directives(self.sql).get("retires", []))


Kind = Literal["function", "view", "trigger"]
M = TypeVar("M", bound=Migration)


@dataclass(frozen=True, slots=True)
class Routine:
    """A routine file: the function or view it defines (``tenantry_`` + its name, or its
    name), and the triggers it creates, each ``(kind, name)`` as the catalog has them (a
    trigger's name is ``table.trigger``)."""

    name: str
    sql: str
    objects: tuple[tuple[Kind, str], ...]
    requires: tuple[str, ...] = ()
    early: bool = False

    @property
    def sha256(self) -> str:
        return _sha256(self.sql)

    @property
    def kind(self) -> Kind:
        return self.objects[0][0]


@dataclass(frozen=True, slots=True)
class ContractStep(Migration):
    """A contract step (``contract/NNNN_name.sql``): removes what an older release uses."""




def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _files(where: str | Path) -> Traversable:
    return where if isinstance(where, Path) else resources.files(where)


def available(schema: Schema = CELL) -> list[Migration]:
    return _numbered(schema.package, "migrations", Migration)


def contract_steps(schema: Schema = CELL) -> list[ContractStep]:
    """The schema's contract steps, in order (none if it has no ``contract`` folder)."""
    if schema.contract is None:
        return []
    return _numbered(schema.contract, "contract steps", ContractStep)


def _numbered(where: str | Path, what: str, kind: type[M]) -> list[M]:
    found = []
    for entry in _files(where).iterdir():
        match = _FILE.match(entry.name)
        if match:
            found.append(kind(int(match[1]), match[2], entry.read_text(encoding="utf-8")))
    found.sort(key=lambda m: m.version)
    versions = [m.version for m in found]
    if versions != list(range(1, len(found) + 1)):
        raise ConfigurationError(f"{what} must be numbered 1..N without gaps: {versions}")
    return found


def rewritten(schema: Schema) -> dict[int, str]:
    """``version -> sha256`` of the original text of each migration rewritten in place."""
    entry = _files(schema.package).joinpath(_REWRITTEN)
    if not entry.is_file():
        return {}
    shas = {}
    for line in entry.read_text(encoding="utf-8").splitlines():
        if line.strip() and not line.startswith("#"):
            version, sha = line.split()
            shas[int(version)] = sha
    return shas


# What a routine's text says, read outside its bodies and comments.
_BODY = re.compile(r"\$([A-Za-z_]*)\$.*?\$\1\$", re.DOTALL)
COMMENT = re.compile(r"--[^\n]*")
_CREATES = re.compile(
    r"\bCREATE\s+(OR\s+REPLACE\s+)?(?:(FUNCTION|VIEW)|TRIGGER)\s+(?:public\.)?(\w+)"
    r"(?(2)|[^;]*?\bON\s+(?:public\.)?(\w+))", re.IGNORECASE)
_DIRECTIVE = re.compile(r"^--\s*(requires|phase|retires):\s*(.*?)\s*$")


def _directives(sql: str) -> dict[str, list[str]]:
    """The ``-- key: a, b`` lines of a file's leading comment."""
    found: dict[str, list[str]] = {}
    for line in sql.splitlines():
        if line.strip() and not line.startswith("--"):
            break
        directive = _DIRECTIVE.match(line)
        if directive:
            found.setdefault(directive[1], []).extend(
                r.strip() for r in directive[2].split(",") if r.strip())
    return found


def parse_routine(name: str, sql: str) -> Routine:
    """A routine file's objects and directives; a one-line error when it breaks a rule."""
    directives = _directives(sql)
    requires = directives.get("requires", [])
    phases = directives.get("phase", [])
    if any(phase != "early" for phase in phases):
        raise ConfigurationError(
            f"routine {name}: unknown phase {', '.join(phases)!r} (only 'early')")
    early = bool(phases)
    text = _BODY.sub("$$", COMMENT.sub("", sql))
    objects: list[tuple[Kind, str]] = []
    for match in _CREATES.finditer(text):
        what = (match[2] or "trigger").lower()
        if not match[1]:
            # Applied again whenever it changes: a plain CREATE would fail the second time.
            raise ConfigurationError(
                f"routine {name}: CREATE {what.upper()} {match[3]} needs OR REPLACE")
        if what == "trigger":
            objects.append(("trigger", f"{match[4]}.{match[3]}"))
        else:
            objects.append(("function" if what == "function" else "view", match[3]))
    defined = [o for o in objects if o[0] != "trigger"]
    if len(defined) != 1 or defined[0][1].removeprefix("tenantry_") != name:
        raise ConfigurationError(
            f"routine {name}: a routine file defines one function or view, named after "
            f"the file (tenantry_{name} or {name}); found {[n for _, n in defined]}")
    if defined[0][0] == "view" and len(objects) > 1:
        raise ConfigurationError(f"routine {name}: a view's file creates no trigger")
    ordered = tuple(defined + [o for o in objects if o[0] == "trigger"])
    return Routine(name, sql, ordered, tuple(requires), early)


def routines(schema: Schema = CELL) -> list[Routine]:
    """The schema's routines in the order they are applied: each after those it requires,
    functions before views, then by name."""
    if schema.routines is None:
        return []
    found = {}
    for entry in _files(schema.routines).iterdir():
        match = _ROUTINE_FILE.match(entry.name)
        if match:
            found[match[1]] = parse_routine(match[1], entry.read_text(encoding="utf-8"))
    for routine in found.values():
        unknown = [r for r in routine.requires if r not in found]
        if unknown:
            raise ConfigurationError(
                f"routine {routine.name} requires {', '.join(unknown)}: no such routine")
    _refuse_lingering(schema, found)
    return _in_order(found)


_DROPS = re.compile(
    r"\bDROP\s+(?:(FUNCTION)|TRIGGER)\s+(?:IF\s+EXISTS\s+)?(?:public\.)?(\w+)"
    r"(?(1)|\s+ON\s+(?:public\.)?(\w+))", re.IGNORECASE)


def _refuse_lingering(schema: Schema, found: dict[str, Routine]) -> None:
    """A migration or contract step that drops a routine's function or trigger while its
    file stays would see it made again by the routines step right after: the file must go
    with it (and a changed signature is a new name). Views are exempt: a migration drops
    one to change a column it reads, and the view's routine brings it back. Migrations
    rewritten in place (rewritten.txt) keep the drops of signatures that changed before
    routines existed. Likewise a step that retires a routine whose file is still here."""
    owner = {obj: r.name for r in found.values() for obj in r.objects}
    in_place = rewritten(schema)
    steps = [("migration", m) for m in available(schema) if m.version not in in_place]
    steps += [("contract step", m) for m in contract_steps(schema)]
    for what, step in steps:
        kept = [name for name in step.retires if name in found]
        if kept:
            raise ConfigurationError(
                f"{what} {step.label} retires {', '.join(kept)}, whose file is still in "
                "routines/: delete it with the step")
        for match in _DROPS.finditer(_BODY.sub("$$", COMMENT.sub("", step.sql))):
            obj: tuple[Kind, str] = (("function", match[2]) if match[1]
                                     else ("trigger", f"{match[3]}.{match[2]}"))
            if obj in owner:
                raise ConfigurationError(
                    f"{what} {step.label} drops {obj[0]} "
                    f"{match[2]}, which routines/{owner[obj]}.sql makes again: delete the "
                    f"file with it (a changed signature is a new name: {owner[obj]}_v2)")


def _in_order(found: dict[str, Routine]) -> list[Routine]:
    waiting = {name: set(r.requires) for name, r in found.items()}
    ready = [(r.kind == "view", name) for name, r in found.items() if not r.requires]
    heapq.heapify(ready)
    ordered: list[Routine] = []
    while ready:
        _, name = heapq.heappop(ready)
        ordered.append(found[name])
        del waiting[name]
        for other, needs in waiting.items():
            if name in needs:
                needs.discard(name)
                if not needs:
                    heapq.heappush(ready, (found[other].kind == "view", other))
    if waiting:
        raise ConfigurationError(
            f"routines require each other in a cycle: {', '.join(sorted(waiting))}")
    return ordered


# Functions, views and (table-level) triggers of the schema migrations create objects in.
