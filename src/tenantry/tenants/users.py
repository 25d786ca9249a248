"""A tenant's people: users with a role, one-time sign-in links, and the tenant console's
sessions (ADR 0043 §5-6).

A role is a fixed set of scopes (``ROLES`` in scopes.py), so a signed-in person is checked
with the same `Scope` values an API key is. A sign-in link is a random token shown once;
only its SHA-256 is stored, and it is used once within `LINK_SECONDS`. A session is a row
too: the cookie holds a random id, the row its SHA-256, and the forms' CSRF token is
derived from the id (a page on another site can neither read the cookie nor the token).
Looking a link or a session up happens before the tenant is known: each goes through one
definer routine (``app_sign_in.sql``, ``app_session.sql``) that answers whose it is."""

from __future__ import annotations

import hashlib
import re
import secrets
from dataclasses import dataclass
from datetime import datetime

import asyncpg

from tenantry.db import Database
from tenantry.db.queries import load
from tenantry.errors import Conflict, NotFound, TenantErased, ValidationFailed
from tenantry.ids import TenantId, UserId
from tenantry.tenants.oidc import Identity
from tenantry.tenants.scopes import ROLES, Scope
from tenantry.tenants.service import TENANT_NOT_FOUND

Q = load(__package__, "users.sql")

USER_NOT_FOUND = "No user with this id."
LINK_SECONDS = 15 * 60  # ADR 0043 §5: a sign-in link lasts 15 minutes
SESSION_SECONDS = 8 * 3600  # a working day, as the operator console's
LINK_PREFIX = "tsl_"
SESSION_PREFIX = "tss_"
MAX_EMAIL = 254  # RFC 5321's path limit, less the angle brackets
#: An address: the local part's ASCII characters RFC 5322 allows unquoted, then a domain
#: name of letters, digits and hyphens with a dot. Plain ASCII on purpose: the same
#: pattern in Python and in the OpenAPI document (ECMA-262), so both refuse alike.
EMAIL_RE = (r"^[A-Za-z0-9.!#$%&'*+/=?^_`{|}~-]{1,64}@"
            r"(?:[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.)+[A-Za-z]{2,63}$")
_EMAIL = re.compile(EMAIL_RE)
_TOKEN = re.compile(r"[A-Za-z0-9_-]{43}")


@dataclass(frozen=True, slots=True)
class User:
    user_id: UserId
    email: str
    role: str
    created_by: str
    created_at: datetime
    disabled_at: datetime | None

    @property
    def scopes(self) -> frozenset[Scope]:
        return ROLES.get(self.role, frozenset())

    @classmethod
    def from_row(cls, r: asyncpg.Record) -> User:
        return cls(UserId(r["user_id"]), r["email"], r["role"], r["created_by"],
                   r["created_at"], r["disabled_at"])


@dataclass(frozen=True, slots=True)
class IssuedLink:
    token: str  # the only time it exists outside the caller: it goes in the link
    expires_at: datetime


@dataclass(frozen=True, slots=True)
class Member:
    """A signed-in person: whose, who, what their role lets them do, and the session's
    CSRF token (its hash identifies the session to end at sign-out)."""

    tenant: TenantId
    user_id: UserId
    email: str
    role: str
    expires_at: datetime
    session_hash: bytes
    csrf: str

    @property
    def scopes(self) -> frozenset[Scope]:
        return ROLES.get(self.role, frozenset())

    def may(self, scope: Scope) -> bool:
        return scope in self.scopes

    @property
    def actor(self) -> str:
        """Who acted, in the audit trail and in a decision's event."""
        return f"user:{self.user_id}"


def parse_email(text: str) -> str:
    """An address as given, or a 400 naming the field."""
    if len(text) > MAX_EMAIL or not _EMAIL.fullmatch(text):
        raise ValidationFailed("email: not an email address (name@example.com)",
                               field="email")
    return text


def parse_role(text: str) -> str:
    if text not in ROLES:
        raise ValidationFailed(f"role: {text!r} is not a role (known: {', '.join(ROLES)})",
                               field="role")
    return text


def _digest(secret: str) -> bytes:
    return hashlib.sha256(secret.encode()).digest()


def csrf_of(session_id: str) -> str:
    """The CSRF token of the session whose cookie holds ``session_id``."""
    return hashlib.sha256(b"tenantry app csrf\0" + session_id.encode()).hexdigest()


async def invite(db: Database, tenant: TenantId, email: str, role: str, *,
                 created_by: str) -> User:
    """A new user of ``tenant`` (409 when the address is already one of its users)."""
    email, role = parse_email(email), parse_role(role)
    async with db.tenant_tx(tenant) as conn:
        found = await conn.fetchrow(Q.tenant_erased_at, tenant.value)
        if found is None:
            raise NotFound(TENANT_NOT_FOUND)
        if found["erased_at"] is not None:
            raise TenantErased("This tenant was erased: it gets no new user.")
        row = await conn.fetchrow(Q.insert_user, tenant.value, UserId.new().uuid, email,
                                  role, created_by)
    if row is None:
        raise Conflict("email: this address is already one of the tenant's users",
                       field="email")
    return User.from_row(row)


async def get_user(db: Database, tenant: TenantId, user: UserId) -> User:
    return User.from_row(await db.tenant_row(tenant, Q.get_user, user.uuid,
                                             missing=USER_NOT_FOUND))


async def users_page(db: Database, tenant: TenantId, *, before: UserId | None,
                     limit: int) -> list[User]:
    async with db.tenant_tx(tenant) as conn:
        rows = await conn.fetch(Q.users_page, tenant.value, before.uuid if before else None,
                                limit)
    return [User.from_row(r) for r in rows]


async def set_role(db: Database, tenant: TenantId, user: UserId, role: str) -> User:
    """A new role, effective on the user's next request (sessions read it every time)."""
    role = parse_role(role)
    async with db.tenant_tx(tenant) as conn:
        row = await conn.fetchrow(Q.set_role, tenant.value, user.uuid, role)
    if row is None:
        raise NotFound(USER_NOT_FOUND)
    return User.from_row(row)


async def disable(db: Database, tenant: TenantId, user: UserId) -> User:
    """Disable a user: their sessions end and their unused links stop working, now."""
    async with db.tenant_tx(tenant) as conn:
        row = await conn.fetchrow(Q.disable_user, tenant.value, user.uuid)
        if row is None:
            raise NotFound(USER_NOT_FOUND)
        await conn.execute(Q.end_sessions_of_user, tenant.value, user.uuid)
        await conn.execute(Q.end_links_of_user, tenant.value, user.uuid)
    return User.from_row(row)


async def issue_link(db: Database, tenant: TenantId, user: UserId, *,
                     created_by: str) -> IssuedLink:
    """A one-time sign-in token for ``user`` (409 for a disabled user)."""
    token = LINK_PREFIX + secrets.token_urlsafe(32)
    async with db.tenant_tx(tenant) as conn:
        found = await conn.fetchrow(Q.get_user, tenant.value, user.uuid)
        if found is None:
            raise NotFound(USER_NOT_FOUND)
        if found["disabled_at"] is not None:
            raise Conflict("This user is disabled: no sign-in link.")
        expires: datetime = await conn.fetchval(Q.insert_link, tenant.value, _digest(token),
                                                user.uuid, created_by, LINK_SECONDS)
    return IssuedLink(token, expires)


def well_formed(secret: str, prefix: str) -> bool:
    """``prefix`` and 43 base64url characters: what a token this platform made looks like
    (anything else is refused without a query)."""
    return secret.startswith(prefix) and bool(_TOKEN.fullmatch(secret[len(prefix):]))


async def sign_in(db: Database, token: str) -> str | None:
    """Use a sign-in link: the new session's id (for the cookie), or None when the link is
    unknown, used already, expired, or its user disabled (one answer for all: the holder
    of a stale link needs a new one either way)."""
    if not well_formed(token, LINK_PREFIX):
        return None
    session_id = SESSION_PREFIX + secrets.token_urlsafe(32)
    row = await db.statement(Q.sign_in, _digest(token), _digest(session_id), SESSION_SECONDS)
    return session_id if row is not None else None


async def session(db: Database, session_id: str | None) -> Member | None:
    """Who the cookie's session is; None when absent, unknown, ended or expired."""
    if not session_id or not well_formed(session_id, SESSION_PREFIX):
        return None
    digest = _digest(session_id)
    row = await db.statement(Q.session, digest)
    if row is None:
        return None
    return Member(TenantId(row["tenant_id"]), UserId(row["user_id"]), row["email"],
                  row["role"], row["expires_at"], digest, csrf_of(session_id))


async def sign_out(db: Database, member: Member) -> None:
    async with db.tenant_tx(member.tenant) as conn:
        await conn.execute(Q.end_session, member.tenant.value, member.session_hash)


@dataclass(frozen=True, slots=True)
class OidcSignIn:
    """What a verified identity found: a session (``session_id`` for the cookie), or the
    tenants it could sign in to, for the person to choose (``choices``), or neither."""

    session_id: str | None
    choices: tuple[TenantId, ...] = ()


async def sign_in_oidc(db: Database, identity: Identity, *,
                       tenant: TenantId | None = None) -> OidcSignIn:
    """Sign in the tenant user of a provider's verified identity (tenants/oidc.py): bound
    to its subject at the first sign-in, found by it afterwards."""
    session_id = SESSION_PREFIX + secrets.token_urlsafe(32)
    rows = await db.statement_rows(
        Q.sign_in_oidc, identity.issuer, identity.subject, identity.email,
        tenant.value if tenant else None, _digest(session_id), SESSION_SECONDS)
    if len(rows) == 1 and rows[0]["signed_in"]:
        return OidcSignIn(session_id)
    return OidcSignIn(None, tuple(TenantId(r["tenant_id"]) for r in rows))
