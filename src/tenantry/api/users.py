"""A tenant's people over HTTP (ADR 0043 §5): ``/v1/users`` with a ``keys:manage`` key
(invite, list, read, change the role, disable; a one-time sign-in link), and the
operator's invite and link under ``/admin/v1/tenants/{id}/users``. The link opens the
tenant console (``/app``, api/tenant_console/); its token is shown once."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from fastapi import APIRouter, Depends, Request
from pydantic import BaseModel, Field

from tenantry.api.admin import TENANT_NOT_FOUND
from tenantry.api.auth import KeysManager, KeysManagerCaller, PlatformDep, operator
from tenantry.api.fields import Body
from tenantry.api.pagination import PageRequest, keyed_by
from tenantry.api.params import parse_or_404
from tenantry.api.platform import Platform
from tenantry.ids import TenantId, UserId
from tenantry.tenants import users
from tenantry.tenants.scopes import Scope

router = APIRouter(prefix="/v1/users", tags=["users"])
admin_router = APIRouter(prefix="/admin/v1", tags=["operator"],
                         dependencies=[Depends(operator)])
_UserPage = Annotated[PageRequest, Depends(keyed_by(UserId.pattern()))]
SIGN_IN_PATH = "/app/sign-in"

RoleName = Literal["viewer", "approver", "developer", "admin"]
_ROLES_DOC = ("`viewer` (runs:read), `approver` (+ approvals:decide), `developer` "
              "(+ runs:write, agents:manage, integrations:manage), `admin` (every scope)")


class InviteUser(Body):
    # ASCII by its pattern: no NUL, no lone surrogate (what Text guards against) either.
    email: str = Field(max_length=users.MAX_EMAIL, pattern=users.EMAIL_RE,
                        description="Their address (one user per address in a tenant, "
                                    "compared without case).")
    role: RoleName = Field(description=f"What they may do: {_ROLES_DOC}.")


class ChangeRole(Body):
    role: RoleName = Field(description=f"The new role: {_ROLES_DOC}.")


class UserOut(BaseModel):
    user_id: str
    email: str
    role: RoleName
    scopes: list[Scope] = Field(description="What the role lets them do.")
    created_by: str = Field(description="`operator`, `key:<key id>` or `user:<user id>`.")
    created_at: datetime
    disabled_at: datetime | None


class UserList(BaseModel):
    data: list[UserOut]
    next_cursor: str | None


class SignInLinkOut(BaseModel):
    url: str = Field(description="Opens the tenant console signed in as the user: once, "
                                 "within 15 minutes. Shown once; only its hash is stored.")
    expires_at: datetime


def _out(u: users.User) -> UserOut:
    return UserOut(user_id=str(u.user_id), email=u.email, role=u.role,
                   scopes=sorted(u.scopes), created_by=u.created_by,
                   created_at=u.created_at, disabled_at=u.disabled_at)


def _link_out(p: Platform, request: Request, link: users.IssuedLink) -> SignInLinkOut:
    base = (p.settings.public_url or str(request.base_url)).rstrip("/")
    return SignInLinkOut(url=f"{base}{SIGN_IN_PATH}?token={link.token}",
                         expires_at=link.expires_at)


def _user(user_id: str) -> UserId:
    return parse_or_404(UserId, user_id, users.USER_NOT_FOUND)


@router.post("", status_code=201, response_model=UserOut)
async def invite_user(body: InviteUser, caller: KeysManagerCaller, p: PlatformDep) -> UserOut:
    """A new user of your tenant with a role. They sign in with a link you make for them
    (``POST /v1/users/{user_id}/sign-in-links``)."""
    return _out(await users.invite(p.db, caller.tenant, body.email, body.role,
                                   created_by=f"key:{caller.key}"))


@router.get("", response_model=UserList)
async def list_users(page: _UserPage, tenant: KeysManager, p: PlatformDep) -> UserList:
    """Your users, disabled ones included, newest first."""
    found = await users.users_page(p.db, tenant, before=page.position(UserId.parse),
                                   limit=page.limit)
    return page.answer(UserList, found, _out, key=lambda u: str(u.user_id))


@router.get("/{user_id}", response_model=UserOut)
async def get_user(user_id: str, tenant: KeysManager, p: PlatformDep) -> UserOut:
    """Get a user.

    Their email, role, the scopes it grants, who invited them and whether they are disabled."""
    return _out(await users.get_user(p.db, tenant, _user(user_id)))


@router.patch("/{user_id}", response_model=UserOut)
async def change_role(
    user_id: str, body: ChangeRole, tenant: KeysManager, p: PlatformDep,
) -> UserOut:
    """A new role, in force from the user's next page (404 for a disabled user)."""
    return _out(await users.set_role(p.db, tenant, _user(user_id), body.role))


@router.delete("/{user_id}", response_model=UserOut)
async def disable_user(user_id: str, tenant: KeysManager, p: PlatformDep) -> UserOut:
    """Disable a user: their sessions end and their unused links stop working at once.
    The user stays listed (the audit trail names them)."""
    return _out(await users.disable(p.db, tenant, _user(user_id)))


@router.post("/{user_id}/sign-in-links", status_code=201, response_model=SignInLinkOut)
async def make_sign_in_link(
    user_id: str, request: Request, caller: KeysManagerCaller, p: PlatformDep,
) -> SignInLinkOut:
    """A one-time link that signs the user in to the tenant console (``/app``): used once,
    within 15 minutes. Send it to them yourself; it is shown only now."""
    link = await users.issue_link(p.db, caller.tenant, _user(user_id),
                                  created_by=f"key:{caller.key}")
    return _link_out(p, request, link)


@admin_router.post("/tenants/{tenant_id}/users", status_code=201, response_model=UserOut)
async def operator_invite_user(tenant_id: str, body: InviteUser, p: PlatformDep) -> UserOut:
    """A new user of the tenant (its first admin, typically)."""
    tenant = parse_or_404(TenantId, tenant_id, TENANT_NOT_FOUND)
    return _out(await users.invite(p.db, tenant, body.email, body.role, created_by="operator"))


@admin_router.post("/tenants/{tenant_id}/users/{user_id}/sign-in-links", status_code=201,
                   response_model=SignInLinkOut)
async def operator_sign_in_link(
    tenant_id: str, user_id: str, request: Request, p: PlatformDep,
) -> SignInLinkOut:
    """A one-time sign-in link for the tenant's user, as ``POST /v1/users/{id}/sign-in-links``."""
    tenant = parse_or_404(TenantId, tenant_id, TENANT_NOT_FOUND)
    link = await users.issue_link(p.db, tenant, _user(user_id), created_by="operator")
    return _link_out(p, request, link)
