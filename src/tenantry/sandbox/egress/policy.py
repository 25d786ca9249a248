"""Egress policy: which host and port a sandbox may reach, and which addresses
it may never reach whatever the allow-list says (loopback, private, link-local and metadata,
CGNAT, multicast, reserved — with IPv4-mapped, NAT64 and 6to4 forms unwrapped, and numeric
host spellings decoded). The proxy in ``egress/proxy.py`` applies it; see its docstring."""

from __future__ import annotations

import asyncio
import ipaddress
import re
import socket
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
#: ``(host, port) -> addresses``; raises OSError when the name does not resolve.
Resolver = Callable[[str, int], Awaitable[Sequence[IPAddress]]]
#: Ports an entry without ``:port`` allows.
DEFAULT_PORTS = frozenset({80, 443})
_NAME = re.compile(r"^(?=.{1,253}$)[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?"
                   r"(?:\.[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?)*$")
_NUMERIC = re.compile(r"^[0-9a-fx.]+$")
_CGNAT = ipaddress.IPv4Network("100.64.0.0/10")
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")
_PRIVATE = (ipaddress.IPv4Network("10.0.0.0/8"), ipaddress.IPv4Network("172.16.0.0/12"),
            ipaddress.IPv4Network("192.168.0.0/16"), ipaddress.IPv6Network("fc00::/7"))


@dataclass(frozen=True, slots=True)
class _Rule:
    host: str  # for a wildcard, the suffix without "*."
    wildcard: bool
    port: int | None

    def matches(self, host: str, port: int) -> bool:
        if port not in ((self.port,) if self.port is not None else DEFAULT_PORTS):
            return False
        if self.wildcard:
            return host.endswith("." + self.host) and literal_address(host) is None
        return host == self.host


@dataclass(frozen=True, slots=True)
class EgressPolicy:
    """The hosts one run's code may reach (its agent version's ``sandbox.egress``). An
    empty policy allows nothing. Entries are validated here: a bad one raises ValueError."""

    hosts: tuple[str, ...]
    _rules: tuple[_Rule, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_rules", tuple(_parse_rule(entry) for entry in self.hosts))

    def check(self, host: str, port: int) -> str | None:
        """None when ``host:port`` is on the allow-list, else the reason it is not."""
        name = normalize_host(host)
        if not self._rules:
            return "this agent allows no network access (its sandbox.egress is empty)"
        if name is None:
            return f"{printable(host)!r} is not a valid host name"
        if any(rule.matches(name, port) for rule in self._rules):
            return None
        return f"{authority(name, port)} is not in this agent's sandbox.egress allow-list"

    def vet_addresses(self, addresses: Iterable[IPAddress]) -> str | None:
        """None when every address is public unicast, else the reason naming the first
        that is not. No address at all is a refusal too."""
        seen = False
        for address in addresses:
            seen = True
            reason = address_refusal(address)
            if reason is not None:
                return reason
        return None if seen else "no address"


def _parse_rule(entry: str) -> _Rule:
    text = entry.strip().lower()
    port: int | None = None
    host, colon, port_text = text.rpartition(":")
    if not colon or (text.startswith("[") and not host.endswith("]")):
        host = text  # no port (or the colons belong to a bracketed IPv6 literal)
    else:
        port = parse_port(port_text)
        if port is None:
            raise ValueError(f"egress entry {entry!r}: bad port {port_text!r}")
    wildcard = host.startswith("*.")
    if wildcard:
        host = host[2:]
    name = normalize_host(host)
    if name is None:
        raise ValueError(f"egress entry {entry!r}: not a host name")
    if wildcard and (literal_address(name) is not None or "." not in name):
        raise ValueError(f"egress entry {entry!r}: a wildcard needs a domain of two or more "
                         "labels (*.example.com)")
    return _Rule(name, wildcard, port)


def normalize_host(host: str) -> str | None:
    """The canonical form of a request's host (lower case, no trailing dot, an IPv6
    literal without brackets), or None if it is not a host name or IP literal."""
    text = host.strip().lower()
    if text.startswith("[") and text.endswith("]"):
        text = text[1:-1]
        if ":" not in text:
            return None
    if ":" in text:
        if "%" in text:
            return None  # a scope id names one of our interfaces: never the tenant's to pick
        try:
            return str(ipaddress.IPv6Address(text))
        except ValueError:
            return None
    text = text.removesuffix(".")
    return text if _NAME.match(text) else None


def literal_address(host: str) -> IPAddress | None:
    """The address a host string spells without DNS: dotted quads, IPv6, and the legacy
    forms ``inet_aton`` (and so the C resolver) accepts — ``2130706433``, ``0x7f.1``,
    ``127.1``, ``0177.0.0.1`` — or None for a name."""
    try:
        return ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        pass
    if _NUMERIC.match(host):
        try:
            return ipaddress.IPv4Address(socket.inet_aton(host))
        except OSError:
            return None
    return None


def address_refusal(address: IPAddress) -> str | None:
    """None for a public unicast address, else why this address may not be reached."""
    kind = _forbidden_kind(address)
    return None if kind is None else f"{address}, {kind}"


def _forbidden_kind(address: IPAddress) -> str | None:
    if isinstance(address, ipaddress.IPv6Address):
        # An IPv4 address inside an IPv6 one reaches that IPv4 address: judge that one.
        embedded = address.ipv4_mapped
        if embedded is None and address in _NAT64:
            embedded = ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
        if embedded is None and address.sixtofour is not None:
            inner = _forbidden_kind(address.sixtofour)
            if inner is not None:
                return f"a 6to4 address embedding {address.sixtofour} ({inner})"
        if embedded is not None:
            inner = _forbidden_kind(embedded)
            return None if inner is None else f"an address embedding {embedded} ({inner})"
        if address.is_site_local:
            return "a site-local address"
    if address.is_unspecified:
        return "an unspecified address"
    if address.is_loopback:
        return "a loopback address"
    if address.is_link_local:
        return "a link-local address (where cloud metadata lives)"
    if address.is_multicast:
        return "a multicast address"
    if isinstance(address, ipaddress.IPv4Address) and address in _CGNAT:
        return "a carrier-grade NAT address (100.64.0.0/10)"
    if any(address in network for network in _PRIVATE):
        return "a private address"
    if address.is_reserved:
        return "a reserved address"
    if address.is_private or not address.is_global:
        return "a special-purpose (non-public) address"
    return None


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why a request will not be carried out, and the HTTP status that says so."""

    status: int
    reason: str


async def system_resolver(host: str, port: int) -> list[IPAddress]:
    """Every address the host's resolver gives for ``host`` (the host's DNS, never the
    sandbox's), in its order, without duplicates."""
    loop = asyncio.get_running_loop()
    infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM,
                                   proto=socket.IPPROTO_TCP)
    addresses: list[IPAddress] = []
    for *_, sockaddr in infos:
        address = ipaddress.ip_address(sockaddr[0])
        if address not in addresses:
            addresses.append(address)
    return addresses


async def resolve(name: str, port: int,
                  resolver: Resolver | None = None) -> Sequence[IPAddress]:
    """The addresses a canonical host name (``normalize_host``) stands for, resolved once:
    what a literal spells (never sent to DNS), else what the resolver answers. Raises
    OSError or UnicodeError when the name does not resolve. The egress proxy and webhooks
    both connect to one of these and never resolve the name again."""
    literal = literal_address(name)
    if literal is not None:
        return (literal,)
    return await (resolver or system_resolver)(name, port)


async def resolve_and_vet(host: str, port: int, policy: EgressPolicy, *,
                          resolver: Resolver | None = None
                          ) -> tuple[IPAddress, ...] | Refusal:
    """The addresses ``host:port`` may be reached at, or why not: the allow-list first
    (nothing is resolved for a host that is not on it), then every resolved address."""
    reason = policy.check(host, port)
    if reason is not None:
        return Refusal(403, reason)
    name = normalize_host(host)
    assert name is not None  # check() refused anything else
    try:
        addresses = await resolve(name, port, resolver)
    except (OSError, UnicodeError) as exc:
        return Refusal(502, f"{name} could not be resolved ({printable(str(exc))})")
    reason = policy.vet_addresses(addresses)
    if reason is not None:
        return Refusal(403, f"{name} resolves to {reason}")
    return tuple(addresses)


def parse_port(text: str) -> int | None:
    if not text.isdigit() or len(text) > 5:
        return None
    port = int(text)
    return port if 0 < port < 65536 else None


def authority(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def printable(text: str, limit: int = 200) -> str:
    """Safe for a status line and a log: printable ASCII, one line, bounded."""
    cleaned = "".join(c if " " <= c <= "~" else "?" for c in text)
    return cleaned if len(cleaned) <= limit else cleaned[:limit] + "..."
