"""The tenant's API keys, for a role holding ``keys:manage``: the list (revoked and
expired ones too), making one — shown once, on the answer to the form, never again — and
revoking one. What ``/v1/api-keys`` does, with the same service calls and the same rule:
no key grants a scope its maker does not hold (here the person's role). Each change is
recorded in the audit trail under the person's name."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from urllib.parse import urlencode

from fastapi import APIRouter
from fastapi.responses import RedirectResponse, Response

from tenantry.api.console.view import HEADERS, parse_id
from tenantry.api.tenant_console import changes
from tenantry.api.tenant_console.view import PREFIX, KeysForm, KeysPage, Page, text
from tenantry.errors import Conflict, NotFound
from tenantry.ids import ApiKeyId
from tenantry.tenants import service
from tenantry.tenants.scopes import Scope

router = APIRouter()
PAGE = 50
MAX_NAME = 200
#: The longest expiry the form offers, in days (the API takes any time).
MAX_DAYS = 3650
CREATE = f"POST {PREFIX}/keys"  # the audit trail's actions
REVOKE = f"POST {PREFIX}/keys/{{key_id}}/revoke"
_DAYS = re.compile(r"[0-9]{1,4}")  # ASCII digits: str.isdigit() takes "²" too


async def _page(v: Page, *, status: int = 200, issued: service.IssuedKey | None = None,
                error: str | None = None) -> Response:
    q = v.request.query_params
    try:
        before = parse_id(ApiKeyId, q.get("before"))
        revoked = parse_id(ApiKeyId, q.get("revoked"))
    except ValueError:
        before = revoked = None
    keys = await service.api_keys_page(v.db, v.member.tenant, before=before, limit=PAGE)
    older = f"{PREFIX}/keys?before={keys[-1].key_id}" if len(keys) == PAGE else None
    return v.render("keys.html", status=status, title="API keys", keys=keys, older=older,
                    now=datetime.now(UTC), issued=issued, error=error, revoked=revoked,
                    grantable=sorted(v.member.scopes), max_days=MAX_DAYS)


@router.get("/keys")
async def keys(v: KeysPage) -> Response:
    return await _page(v)


@router.post("/keys")
async def create(v: KeysForm) -> Response:
    form = await v.request.form()
    wanted = set()
    for name in form.getlist("scope"):
        try:
            wanted.add(Scope(text(name)))
        except ValueError:
            return await _page(v, status=400, error=f"{text(name)[:40]!r} is not a scope.")
    if not wanted:
        return await _page(v, status=400, error="Choose at least one scope for the key.")
    beyond = sorted(wanted - v.member.scopes)
    if beyond:  # what the API answers a key asking for more than it holds
        return v.error(403, "Not allowed", f"Your role ({v.member.role}) cannot grant "
                                           f"{beyond[0].value}, which it does not hold.")
    days = text(form.get("expires_in_days")).strip()
    expires_at = None
    if days:
        if not _DAYS.fullmatch(days) or not 1 <= int(days) <= MAX_DAYS:
            return await _page(v, status=400, error=f"Expiry: a number of days from 1 to "
                                                    f"{MAX_DAYS}, or empty for never.")
        expires_at = datetime.now(UTC) + timedelta(days=int(days))
    name = text(form.get("name")).replace("\x00", "").strip()[:MAX_NAME]
    try:
        issued = await service.issue_api_key(v.db, v.member.tenant, service.NewKey(
            name, frozenset(wanted), expires_at, created_by=v.member.actor))
    except Conflict as exc:
        return await _page(v, status=409, error=exc.detail)
    await changes.record(v, CREATE, 201)
    # The secret is on this answer only (no-store, like every console page): a redirect
    # would have to keep it somewhere to show it after.
    return await _page(v, status=201, issued=issued)


@router.post("/keys/{key_id}/revoke")
async def revoke(key_id: str, v: KeysForm) -> Response:
    try:
        key = ApiKeyId.parse(key_id)
        await service.revoke_api_key(v.db, v.member.tenant, key, v.platform.auth_cache)
    except (ValueError, NotFound):  # another tenant's too: nothing says it exists
        return v.not_found("No key with this id.")
    await changes.record(v, REVOKE)
    return RedirectResponse(f"{PREFIX}/keys?" + urlencode({"revoked": str(key)}),
                            status_code=303, headers=HEADERS)
