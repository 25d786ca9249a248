"""TENANTRY_DATABASE_URL as the platform reads it: one host or several (a highly available
cell lists every node, docs/how-to/ha-cell.md), in either of libpq's two spellings.

- ``postgresql://user:pw@a:5432,b:5433/db?...`` or ``postgresql://user@/db?host=a,b&port=5432``
  (a ``host`` starting with ``/`` is a unix socket directory);
- ``host=a,b port=5432,5433 dbname=db user=u`` (keyword/value; values may be single-quoted,
  with ``\\'`` and ``\\\\`` inside), which asyncpg does not read, so it is rewritten as a URL.

With more than one host and no ``target_session_attrs`` the URL gets ``read-write``: every
connection (pools, LISTEN loops, migrations) then goes to whichever node is the writable
primary now and skips standbys, which would refuse every write. Nothing here connects."""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from urllib.parse import parse_qsl, quote, unquote, urlencode

#: Keyword/value settings that are parts of a URL rather than its query string.
_URL_PARTS = ("host", "hostaddr", "port", "user", "password", "dbname")
_KEYWORD = re.compile(r"\s*([A-Za-z_]+)\s*=\s*('(?:[^'\\]|\\.)*'|[^\s']*)")
_SCHEMES = ("postgresql://", "postgres://")


class MalformedDsn(ValueError):
    """The URL cannot be read; the message says what is wrong (never the password)."""


@dataclass(frozen=True, slots=True)
class Host:
    name: str
    port: int

    @property
    def where(self) -> str:
        return self.name if self.name.startswith("/") else f"{_bracketed(self.name)}:{self.port}"


@dataclass(frozen=True, slots=True)
class Dsn:
    hosts: tuple[Host, ...]
    database: str
    #: As given ("" if the URL names none: libpq then uses the OS user; see :attr:`login`).
    user: str
    password: str | None
    query: dict[str, str] = field(default_factory=dict)

    @property
    def login(self) -> str:
        """The user, for messages (``postgres`` when none is given, as every example has)."""
        return self.user or "postgres"

    @property
    def where(self) -> str:
        """``Postgres at a:5432`` or ``Postgres at a:5432, b:5433`` (every host tried)."""
        return "Postgres at " + ", ".join(h.where for h in self.hosts)

    @property
    def target_session_attrs(self) -> str:
        return self.query.get("target_session_attrs", "any")

    def url(self) -> str:
        """The URL asyncpg reads: hosts in the netloc, or in ``?host=`` when one is a socket."""
        auth = quote(self.user, safe="")
        if self.password is not None:
            auth += ":" + quote(self.password, safe="")
        netloc = f"{auth}@" if auth else ""
        query = dict(self.query)
        if any(h.name.startswith("/") for h in self.hosts):
            query = {"host": ",".join(h.name for h in self.hosts),
                     "port": ",".join(str(h.port) for h in self.hosts), **query}
        else:
            netloc += ",".join(f"{_bracketed(h.name)}:{h.port}" for h in self.hosts)
        text = f"postgresql://{netloc}/{quote(self.database, safe='')}"
        return f"{text}?{urlencode(query)}" if query else text


def parse(text: str) -> Dsn:
    """The hosts, database, user and settings ``text`` names, with libpq's defaults for what
    it leaves out; :class:`MalformedDsn` saying why it cannot be read."""
    text = text.strip()
    if text.startswith(_SCHEMES):
        return _from_url(text)
    if _KEYWORD.match(text):
        return _from_keywords(text)
    raise MalformedDsn("expected a postgresql:// URL or libpq keyword=value settings "
                       "(host=... dbname=...)")


def for_cluster(text: str) -> str:
    """``text`` as the URL every connection of this process uses: keyword/value rewritten,
    and ``target_session_attrs=read-write`` added when it lists several hosts and says
    nothing of which to use; otherwise exactly as given."""
    dsn = parse(text)
    choose = len(dsn.hosts) > 1 and "target_session_attrs" not in dsn.query
    if not choose and text.strip().startswith(_SCHEMES):
        return text.strip()
    if choose:
        dsn = replace(dsn, query={**dsn.query, "target_session_attrs": "read-write"})
    return dsn.url()


def _from_url(text: str) -> Dsn:
    rest = text.split("://", 1)[1]
    rest, _, query_text = rest.partition("?")
    netloc, _, path = rest.partition("/")
    userinfo, _, hostlist = netloc.rpartition("@")
    user, _, password = userinfo.partition(":")
    query = dict(parse_qsl(query_text, keep_blank_values=True))
    names: list[str] = []
    ports: list[str] = []
    for item in filter(None, hostlist.split(",")):
        name, port = _split_host(item)
        names.append(name)
        ports.append(port)
    if not names and query.get("host"):
        names = query.pop("host").split(",")
        port = query.pop("port", "")
        ports = port.split(",") if port else []
    else:
        query.pop("host", None)
        if "port" in query and not any(ports):
            ports = query.pop("port").split(",")
    return _dsn(names, ports, database=unquote(path) or query.pop("dbname", ""),
                user=unquote(user) or query.pop("user", ""),
                password=unquote(password) if ":" in userinfo else query.pop("password", None),
                query=query)


def _from_keywords(text: str) -> Dsn:
    values: dict[str, str] = {}
    position = 0
    while position < len(text.rstrip()):
        match = _KEYWORD.match(text, position)
        if match is None:
            raise MalformedDsn(f"cannot read the settings after {text[:position].strip()!r}: "
                               f"expected keyword=value")
        raw = match.group(2)
        if raw.startswith("'"):
            raw = re.sub(r"\\(.)", r"\1", raw[1:-1])
        values[match.group(1)] = raw
        position = match.end()
    names = (values.get("host") or values.get("hostaddr") or "").split(",")
    ports = values["port"].split(",") if values.get("port") else []
    query = {k: v for k, v in values.items() if k not in _URL_PARTS}
    return _dsn([n for n in names if n], ports, database=values.get("dbname", ""),
                user=values.get("user", ""), password=values.get("password"), query=query)


def _dsn(names: list[str], ports: list[str], *, database: str, user: str,
         password: str | None, query: dict[str, str]) -> Dsn:
    names = names or ["localhost"]
    if len(ports) > 1 and len(ports) != len(names):
        raise MalformedDsn(f"{len(names)} host(s) but {len(ports)} ports: give one port "
                           f"for all, or one per host")
    numbers: list[int] = []
    for port in ports or [""]:
        try:
            number = int(port) if port else 5432
        except ValueError:
            raise MalformedDsn(f"port {port!r} is not a number") from None
        if not 0 < number < 65536:
            raise MalformedDsn(f"port {number} is out of range (1-65535)")
        numbers.append(number)
    if len(numbers) == 1:
        numbers *= len(names)
    return Dsn(tuple(Host(n, p) for n, p in zip(names, numbers, strict=True)),
               database or user or "postgres", user, password, query)


def _split_host(item: str) -> tuple[str, str]:
    """``a:5432`` / ``[::1]:5432`` / ``a`` into the name and its port (``""`` if none)."""
    if item.startswith("["):
        name, _, rest = item[1:].partition("]")
        return name, rest.removeprefix(":")
    name, _, port = item.partition(":")
    return unquote(name), port


def _bracketed(name: str) -> str:
    return f"[{name}]" if ":" in name else name
