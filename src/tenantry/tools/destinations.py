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

Operator-registered servers are the operator's decision and are not held to these rules.

The provider accounts tenants register themselves (``POST /v1/model-accounts``: bring your
own key) are held to the same rules, at registration and at every connection the model
gateway makes to them (models/clients.py): a tenant's base URL is as much the tenant's as
its tool server's. Only the hosts allowed (``TENANTRY_TENANT_MODEL_ACCOUNT_HOSTS``: the
providers an operator lets tenants use need not be its tool vendors) and the refusal (its
field and type) differ: :data:`MODEL_ACCOUNT`."""

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


class AccountUrlRefused(UrlRefused):
    """A tenant's own model account base URL the operator's rules refuse."""

    type: ClassVar[str] = "model_account_url_refused"
    title: ClassVar[str] = "Model account URL refused"


@dataclass(frozen=True, slots=True)
class Subject:
    """What the URLs being vetted belong to: the request's field naming one, what the
    refusal calls such things and its type, and the variable listing their allowed hosts."""

    field: str
    noun: str
    refused: type[UrlRefused]
    hosts_variable: str


TOOL_SERVER = Subject("url", "tool servers", UrlRefused, "TENANTRY_TENANT_TOOL_SERVER_HOSTS")
MODEL_ACCOUNT = Subject("base_url", "model accounts", AccountUrlRefused,
                        "TENANTRY_TENANT_MODEL_ACCOUNT_HOSTS")


@dataclass(frozen=True, slots=True)
class Destinations:
    """The operator's rules for what tenants register themselves: tool servers, or (with
    ``subject``) model accounts. ``hosts`` empty: any host (its addresses are still
    vetted). A bad entry raises ValueError here, at start."""

    hosts: tuple[str, ...] = ()
    allow_private: bool = False
    resolver: Resolver | None = field(default=None, compare=False)
    subject: Subject = TOOL_SERVER
    _allowed: EgressPolicy | None = field(init=False, default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_allowed", EgressPolicy(self.hosts) if self.hosts else None)

    @classmethod
    def of(cls, settings: Settings, subject: Subject = TOOL_SERVER) -> Destinations:
        """The operator's rules as configured: the hosts of ``subject``'s variable
        (``TENANTRY_TENANT_TOOL_SERVER_HOSTS``, ``TENANTRY_TENANT_MODEL_ACCOUNT_HOSTS``)
        and the one switch for private addresses (``TENANTRY_TENANT_TOOL_SERVERS_ALLOW_
        PRIVATE``); a bad host entry is a ConfigurationError naming the variable."""
        hosts = (settings.tenant_model_account_hosts if subject is MODEL_ACCOUNT
                 else settings.tenant_tool_server_hosts)
        try:
            return cls(tuple(hosts), settings.tenant_tool_servers_allow_private,
                       subject=subject)
        except ValueError as exc:
            raise ConfigurationError(f"{subject.hosts_variable}: {exc}") from None

    async def vet_url(self, url: str) -> None:
        """Refuse (:class:`UrlRefused`, of the subject's type) a URL a tenant may not
        register; resolves it."""
        field_, noun, refused = self.subject.field, self.subject.noun, self.subject.refused
        parts = urlsplit(url)
        name = normalize_host(parts.hostname or "")
        if name is None or parts.scheme not in ("http", "https"):
            raise refused(f"{field_}: not an http(s) URL with a host name", field=field_)
        if parts.scheme != "https" and not self.allow_private:
            raise refused(f"{field_}: {noun} you register must use https", field=field_)
        try:
            port = parts.port or (443 if parts.scheme == "https" else 80)
        except ValueError:
            raise refused(f"{field_}: bad port", field=field_) from None
        if self._allowed is not None and self._allowed.check(name, port) is not None:
            raise refused(f"{field_}: {printable(name)}:{port} is not among the hosts the "
                          f"operator allows for {noun} ({self.subject.hosts_variable})",
                          field=field_)
        await self.addresses(name, port)

    async def addresses(self, host: str, port: int) -> list[str]:
        """The addresses to connect to for ``host:port``, each vetted, resolved once here
        (the HTTP client connects to these literals only). Raises :class:`UrlRefused`."""
        field_, noun, refused = self.subject.field, self.subject.noun, self.subject.refused
        name = normalize_host(host)
        if name is None:
            raise refused(f"{printable(host)!r} is not a valid host name", field=field_)
        try:
            found = await resolve(name, port, self.resolver)
        except (OSError, UnicodeError):
            raise refused(f"{field_}: {name} does not resolve", field=field_) from None
        if not found:
            raise refused(f"{field_}: {name} resolves to no address", field=field_)
        if not self.allow_private:
            for address in found:
                refusal = address_refusal(address)
                if refusal is not None:  # one bad answer refuses the name: no picking around
                    raise refused(f"{field_}: {name} resolves to {refusal}, which {noun} "
                                  "you register may not be at", field=field_)
        return [str(address) for address in found]

    async def connect_to(self, host: str, port: int) -> list[str]:
        """:meth:`addresses` as the HTTP client's ``connect_to`` hook: a refusal is a
        connection that could not be made, saying why."""
        try:
            return await self.addresses(host, port)
        except UrlRefused as exc:
            raise http1.ConnectFailed(f"refused: {exc.detail}") from None
