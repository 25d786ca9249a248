"""The operator's people over HTTP (ADR 0043 §8): ``/admin/v1/operators`` with the operator
token — invite with a role, list, read, change the role, disable, and a one-time link that
signs them in to the operator console (``/console/sign-in``). The token stays the API's
credential (automation, and inviting the first operator); the people use the console."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from fastapi import APIRouter, Depends, Request
from pydantic import BaseModel, Field

from tenantry.api.auth import PlatformDep, operator
from tenantry.api.console import operators
from tenantry.api.fields import Body
from tenantry.api.pagination import PageRequest, keyed_by
from tenantry.api.params import parse_or_404
from tenantry.ids import OperatorId
from tenantry.tenants import operator_tokens
from tenantry.tenants.users import EMAIL_RE, MAX_EMAIL

router = APIRouter(prefix="/admin/v1/operators", tags=["operator"],
                   dependencies=[Depends(operator)])
token_router = APIRouter(prefix="/admin/v1/operator-token", tags=["operator"],
                         dependencies=[Depends(operator)])
_Page = Annotated[PageRequest, Depends(keyed_by(OperatorId.pattern()))]
SIGN_IN_PATH = "/console/sign-in"
#: Who made a change through this API: the token's holder.
BY_TOKEN = "operator token"

RoleName = Literal["read-only", "support", "admin"]


class InviteOperator(Body):
    email: str = Field(max_length=MAX_EMAIL, pattern=EMAIL_RE,
                       description="Their address (one operator per address, compared "
                                   "without case).")
    role: RoleName = Field(description=f"What they may do: {operators.ROLES_DOC}.")


class ChangeOperatorRole(Body):
    role: RoleName = Field(description=f"The new role: {operators.ROLES_DOC}.")


class OperatorOut(BaseModel):
    operator_id: str
    email: str
    role: RoleName
    created_by: str = Field(description="`operator token`, or the operator who invited them.")
    created_at: datetime
    disabled_at: datetime | None


class OperatorList(BaseModel):
    data: list[OperatorOut]
    next_cursor: str | None


class OperatorSignInLinkOut(BaseModel):
    url: str = Field(description="Opens the operator console signed in as the operator: "
                                 "once, within 15 minutes. Shown once; only its hash is "
                                 "stored.")
    expires_at: datetime


def _out(o: operators.OperatorUser) -> OperatorOut:
    return OperatorOut(operator_id=str(o.user_id), email=o.email, role=o.role.value,
                       created_by=o.created_by, created_at=o.created_at,
                       disabled_at=o.disabled_at)


def _id(operator_id: str) -> OperatorId:
    return parse_or_404(OperatorId, operator_id, operators.OPERATOR_NOT_FOUND)


@router.post("", status_code=201, response_model=OperatorOut)
async def invite_operator(body: InviteOperator, p: PlatformDep) -> OperatorOut:
    """A new operator with a role (409 when the address is one already). They sign in
    with a link (``POST /admin/v1/operators/{operator_id}/sign-in-links``) or, when one is
    configured, the OpenID Connect provider."""
    return _out(await operators.invite(p.cross_tenant_db, body.email, body.role,
                                       created_by=BY_TOKEN))


@router.get("", response_model=OperatorList)
async def list_operators(page: _Page, p: PlatformDep) -> OperatorList:
    """Every operator, disabled ones included, newest first."""
    found = await operators.page(p.cross_tenant_db, before=page.position(OperatorId.parse),
                                 limit=page.limit)
    return page.answer(OperatorList, found, _out, key=lambda o: str(o.user_id))


@router.get("/{operator_id}", response_model=OperatorOut)
async def get_operator(operator_id: str, p: PlatformDep) -> OperatorOut:
    """Get an operator.

    Their email, role, who invited them and whether they are disabled."""
    return _out(await operators.get(p.cross_tenant_db, _id(operator_id)))


@router.patch("/{operator_id}", response_model=OperatorOut)
async def change_operator_role(
    operator_id: str, body: ChangeOperatorRole, p: PlatformDep,
) -> OperatorOut:
    """A new role, in force from their next console page (404 for a disabled operator)."""
    return _out(await operators.set_role(p.cross_tenant_db, _id(operator_id), body.role))


@router.delete("/{operator_id}", response_model=OperatorOut)
async def disable_operator(operator_id: str, p: PlatformDep) -> OperatorOut:
    """Disable an operator: their console sessions end at their next request and their
    unused links stop working. They stay listed (the Actions page names them)."""
    return _out(await operators.disable(p.cross_tenant_db, _id(operator_id)))


@router.post("/{operator_id}/sign-in-links", status_code=201,
             response_model=OperatorSignInLinkOut)
async def make_operator_sign_in_link(
    operator_id: str, request: Request, p: PlatformDep,
) -> OperatorSignInLinkOut:
    """A one-time link that signs the operator in to the operator console: used once,
    within 15 minutes (404 for a disabled operator). Shown only now."""
    link = await operators.issue_link(p.cross_tenant_db, _id(operator_id), created_by=BY_TOKEN)
    base = (p.settings.public_url or str(request.base_url)).rstrip("/")
    return OperatorSignInLinkOut(url=f"{base}{SIGN_IN_PATH}?token={link.token}",
                                 expires_at=link.expires_at)


class RotateOperatorToken(Body):
    overlap_seconds: int = Field(
        default=3600, ge=0, le=operator_tokens.MAX_OVERLAP_SECONDS,
        description="How long the tokens in force now keep working (0 to 7 days; an hour "
                    "by default), so automation and browsers move over without an outage.")


class RotatedOperatorToken(BaseModel):
    operator_token: str = Field(description="The new operator token, shown once; only its "
                                            "SHA-256 is stored.")
    previous_valid_until: datetime = Field(description="When every other operator token "
                                                       "stops working.")


@token_router.post("/rotate", status_code=201, response_model=RotatedOperatorToken)
async def rotate_operator_token(
    p: PlatformDep, body: RotateOperatorToken | None = None,
) -> RotatedOperatorToken:
    """A new operator token, in force at once in every API process; the others (the
    configured one included) stop after ``overlap_seconds``, with no restart. Configure the
    new one (``TENANTRY_OPERATOR_TOKEN``) before the overlap ends: a process configured
    with a retired token starts, and refuses it. A process configured with a token the
    database has never seen makes that one the only one, as changing the token always did."""
    overlap = (body or RotateOperatorToken()).overlap_seconds
    token, ends = await p.operator_tokens.rotate(overlap, by=BY_TOKEN)
    return RotatedOperatorToken(operator_token=token, previous_valid_until=ends)
