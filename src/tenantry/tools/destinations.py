"""Where a tool server a tenant registers itself may be (``POST /v1/tool-servers``): the
operator's rules, checked at registration and again at every connection to it.

A tenant's URL is the tenant's, the network the platform reaches it from is ours, so:

- the scheme is ``https`` (tokens and credentials never cross in clear), unless the operator
  allows private addresses (development: a server on this machine);
- the host is one the operator allows (``TENANTRY_TENANT_TOOL_SERVER_HOSTS``, the egress
  allow-list's syntax: ``api.example.com``, ``*.example.com``, ``host:8443``; unset: any);
- every address the name resolves to is public unicast — never loopback, private,
  link-local, the cloud metadata address, CGNAT, multicast or reserved (the egress proxy's
  own address policy) — unless ``TENANTRY_TENANT_TOOL_SERVERS_ALLOW_PRIVATE`` is on;
- and the connection goes to an address vetted then (:meth:`Destinations.addresses`, the
  HTTP client's connect hook for such servers), never to a second resolution: a name that
  rebinds to ``127.0.0.1`` after the check reaches nothing. The same holds for the OAuth
  documents and endpoints the platform itself fetches for such a server.

Operator-registered servers are the operator's decision and are not held to these rules."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar
from urllib.parse import urlsplit

from tenantry import http1
from tenantry.config import Settings
from tenantry.errors import ConfigurationError, TenantryError
from tenantry.sandbox.egress.policy import (
    EgressPolicy,
    Resolver,
    address_refusal,
    normalize_host,
    printable,
    resolve,
)


class UrlRefused(TenantryError):
    """A tenant's tool server URL the operator's rules refuse (``reason`` says which)."""

    type: ClassVar[str] = "tool_server_url_refused"
    status: ClassVar[int] = 422
    title: ClassVar[str] = "Tool server URL refused"


@dataclass(frozen=True, slots=True)
class Destinations:
    """The operator's rules for tenant-registered tool servers. ``hosts`` empty: any host
    (its addresses are still vetted). A bad entry raises ValueError here, at start."""

    hosts: tuple[str, ...] = ()
    allow_private: bool = False
    resolver: Resolver | None = field(default=None, compare=False)
    _allowed: EgressPolicy | None = field(init=False, default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_allowed", EgressPolicy(self.hosts) if self.hosts else None)

    @classmethod
    def of(cls, settings: Settings) -> Destinations:
        """The operator's rules as configured (``TENANTRY_TENANT_TOOL_SERVER_*``); a bad
        host entry is a ConfigurationError naming the variable."""
        try:
            return cls(tuple(settings.tenant_tool_server_hosts),
                       settings.tenant_tool_servers_allow_private)
        except ValueError as exc:
            raise ConfigurationError(f"TENANTRY_TENANT_TOOL_SERVER_HOSTS: {exc}") from None

    async def vet_url(self, url: str) -> None:
        """Refuse (:class:`UrlRefused`) a URL a tenant may not register; resolves it."""
        parts = urlsplit(url)
        name = normalize_host(parts.hostname or "")
        if name is None or parts.scheme not in ("http", "https"):
            raise UrlRefused("url: not an http(s) URL with a host name", field="url")
        if parts.scheme != "https" and not self.allow_private:
            raise UrlRefused("url: tool servers you register must use https", field="url")
        try:
            port = parts.port or (443 if parts.scheme == "https" else 80)
        except ValueError:
            raise UrlRefused("url: bad port", field="url") from None
        if self._allowed is not None and self._allowed.check(name, port) is not None:
            raise UrlRefused(f"url: {printable(name)}:{port} is not among the hosts the operator "
                             "allows for tool servers (TENANTRY_TENANT_TOOL_SERVER_HOSTS)",
                             field="url")
        await self.addresses(name, port)

    async def addresses(self, host: str, port: int) -> list[str]:
        """The addresses to connect to for ``host:port``, each vetted, resolved once here
        (the HTTP client connects to these literals only). Raises :class:`UrlRefused`."""
        name = normalize_host(host)
        if name is None:
            raise UrlRefused(f"{printable(host)!r} is not a valid host name", field="url")
        try:
            found = await resolve(name, port, self.resolver)
        except (OSError, UnicodeError):
            raise UrlRefused(f"url: {name} does not resolve", field="url") from None
        if not found:
            raise UrlRefused(f"url: {name} resolves to no address", field="url")
        if not self.allow_private:
            for address in found:
                refusal = address_refusal(address)
                if refusal is not None:  # one bad answer refuses the name: no picking around
                    raise UrlRefused(f"url: {name} resolves to {refusal}, which tool servers "
                                     "you register may not be at", field="url")
        return [str(address) for address in found]

    async def connect_to(self, host: str, port: int) -> list[str]:
        """:meth:`addresses` as the HTTP client's ``connect_to`` hook: a refusal is a
        connection that could not be made, saying why."""
        try:
            return await self.addresses(host, port)
        except UrlRefused as exc:
            raise http1.ConnectFailed(f"refused: {exc.detail}") from None
