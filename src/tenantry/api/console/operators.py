"""The operator's people (ADR 0043 §8, migration 0055): operators with a role, one-time
sign-in links, and who a console session names.

Roles are ranked: ``read-only`` sees every console page and changes nothing; ``support``
also acts on runs and tasks (cancel, decide approvals, requeue, connect a tool server,
pause a tenant's admissions); ``admin`` also revokes tenants' keys and ends every console
session — what the operator token's holder may (a session opened with the token is an
admin's). The operator API stays the token's: automation, and the way the first operator
is invited.

The rows are platform-wide and live on the console's pool (the tenant pool's role cannot
read them). A session is the console's signed cookie naming the operator's id; each of its
requests reads the operator's row again, so disabling someone or changing their role
takes effect on their next page."""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

import asyncpg

from tenantry.db import Database
from tenantry.db.queries import load
from tenantry.errors import Conflict, NotFound, ValidationFailed
from tenantry.ids import OperatorId
from tenantry.tenants.oidc import Identity
from tenantry.tenants.users import LINK_SECONDS, parse_email, well_formed

Q = load(__package__, "operators.sql")

OPERATOR_NOT_FOUND = "No operator with this id."
LINK_PREFIX = "osl_"


class Role(StrEnum):
    READ_ONLY = "read-only"
    SUPPORT = "support"
    ADMIN = "admin"

    @property
    def rank(self) -> int:
        return _RANK[self]


_RANK = {Role.READ_ONLY: 0, Role.SUPPORT: 1, Role.ADMIN: 2}
ROLES_DOC = ("`read-only` (every console page, no action), `support` (+ cancel runs, "
             "decide approvals, requeue tasks, connect tool servers, pause admissions), "
             "`admin` (+ revoke tenants' keys, end every console session)")


def parse_role(text: str) -> Role:
    try:
        return Role(text)
    except ValueError:
        raise ValidationFailed(f"role: {text!r} is not an operator role (known: "
                               f"{', '.join(Role)})", field="role") from None


@dataclass(frozen=True, slots=True)
class Operator:
    user_id: OperatorId
    email: str
    role: Role

    def may(self, needed: Role) -> bool:
        return self.role.rank >= needed.rank

    @property
    def actor(self) -> str:
        """Who acted, on the Actions page."""
        return f"operator {self.email}"

    @classmethod
    def from_row(cls, r: asyncpg.Record) -> Operator:
        return cls(OperatorId(r["user_id"]), r["email"], Role(r["role"]))


@dataclass(frozen=True, slots=True)
class OperatorUser:
    """An operator as the API lists them."""

    user_id: OperatorId
    email: str
    role: Role
    created_by: str
    created_at: datetime
    disabled_at: datetime | None

    @classmethod
    def from_row(cls, r: asyncpg.Record) -> OperatorUser:
        return cls(OperatorId(r["user_id"]), r["email"], Role(r["role"]), r["created_by"],
                   r["created_at"], r["disabled_at"])


@dataclass(frozen=True, slots=True)
class IssuedLink:
    token: str  # the only time it exists outside the caller: it goes in the link
    expires_at: datetime


def _digest(secret: str) -> bytes:
    return hashlib.sha256(secret.encode()).digest()


async def invite(db: Database, email: str, role: str, *, created_by: str) -> OperatorUser:
    """A new operator (409 when the address is one already). ``db``: the console's pool."""
    email, checked = parse_email(email), parse_role(role)
    async with db.unscoped() as conn:
        row = await conn.fetchrow(Q.insert_operator, OperatorId.new().uuid, email,
                                  checked.value, created_by)
    if row is None:
        raise Conflict("email: this address is already an operator's", field="email")
    return OperatorUser.from_row(row)


async def _one(db: Database, query: str, *args: object) -> OperatorUser:
    """The operator ``query`` answers with (reads or changes); 404 when it answers none."""
    async with db.unscoped() as conn:
        row = await conn.fetchrow(query, *args)
    if row is None:
        raise NotFound(OPERATOR_NOT_FOUND)
    return OperatorUser.from_row(row)


async def get(db: Database, user: OperatorId) -> OperatorUser:
    return await _one(db, Q.get_operator, user.uuid)


async def page(db: Database, *, before: OperatorId | None, limit: int) -> list[OperatorUser]:
    async with db.unscoped() as conn:
        rows = await conn.fetch(Q.operators_page, before.uuid if before else None, limit)
    return [OperatorUser.from_row(r) for r in rows]


async def set_role(db: Database, user: OperatorId, role: str) -> OperatorUser:
    """A new role, in force from their next page (404 for a disabled operator)."""
    return await _one(db, Q.set_role, user.uuid, parse_role(role).value)


async def disable(db: Database, user: OperatorId) -> OperatorUser:
    """Their sessions end on their next request and their unused links stop working."""
    return await _one(db, Q.disable_operator, user.uuid)


async def issue_link(db: Database, user: OperatorId, *, created_by: str) -> IssuedLink:
    """A one-time sign-in token for the operator console (404 for a disabled or unknown
    operator)."""
    token = LINK_PREFIX + secrets.token_urlsafe(32)
    async with db.unscoped() as conn:
        expires: datetime | None = await conn.fetchval(Q.insert_link, _digest(token),
                                                       user.uuid, created_by, LINK_SECONDS)
    if expires is None:
        raise NotFound(OPERATOR_NOT_FOUND)
    return IssuedLink(token, expires)


async def use_link(db: Database, token: str) -> Operator | None:
    """The operator a link signs in, once; None when it is unknown, used, expired or its
    operator disabled (one answer for all)."""
    if not well_formed(token, LINK_PREFIX):
        return None
    async with db.unscoped() as conn:
        row = await conn.fetchrow(Q.use_link, _digest(token))
    return Operator.from_row(row) if row is not None else None


async def signed_in(db: Database, user: OperatorId) -> Operator | None:
    async with db.unscoped() as conn:
        row = await conn.fetchrow(Q.signed_in, user.uuid)
    return Operator.from_row(row) if row is not None else None


async def sign_in_oidc(db: Database, identity: Identity) -> Operator | None:
    """The operator of a provider's verified identity, bound to its subject at the first
    sign-in; None when no enabled operator has the address (or it is bound to another)."""
    async with db.unscoped() as conn:
        row = await conn.fetchrow(Q.sign_in_oidc, identity.issuer, identity.subject,
                                  identity.email)
    return Operator.from_row(row) if row is not None else None
