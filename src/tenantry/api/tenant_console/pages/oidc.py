"""Signing in by OpenID Connect (tenants/oidc.py, ADR 0043 §5): ``/app/oidc/start`` sends
the browser to the operator's provider, ``/app/oidc/callback`` takes it back.

The flow's cookie is ``SameSite=Lax``, the one cookie here that is not ``Strict``: the
callback is a navigation from the provider's site, which a strict cookie would not reach.
It is scoped to ``/app/oidc`` and deleted by the callback's answer, whatever it is, so a
callback URL replayed (from the history, a log, a proxy) finds no flow. The session cookie
it sets is strict, so the callback answers with a page that moves on to ``/app`` itself: a
redirect would still count as the provider's navigation, and the new cookie would not go
with it."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from tenantry.api.console.view import HEADERS, secure_cookies
from tenantry.api.platform import Platform
from tenantry.api.tenant_console.view import PREFIX, SESSION_COOKIE, cookie_args, render
from tenantry.ids import TenantId
from tenantry.tenants import users
from tenantry.tenants.oidc import FLOW_SECONDS, Flow, SignInFailed, callback_identity

router = APIRouter()
FLOW_COOKIE = "tenantry_app_oidc"
_FLOW_PATH = f"{PREFIX}/oidc"


def _flow_cookie_args(platform: Platform, request: Request) -> dict[str, Any]:
    return {"httponly": True, "samesite": "lax", "path": _FLOW_PATH,
            "secure": secure_cookies(platform, request)}


def _refused(request: Request, status: int, message: str) -> HTMLResponse:
    platform: Platform = request.app.state.platform
    page = render(request.app.state.tenant_console, request, "sign_in_failed.html",
                  status=status, title="Sign-in failed", message=message)
    page.delete_cookie(FLOW_COOKIE, **_flow_cookie_args(platform, request))
    return page


def _callback_url(platform: Platform, request: Request) -> str:
    base = (platform.settings.public_url or str(request.base_url)).rstrip("/")
    return f"{base}{_FLOW_PATH}/callback"


@router.get("/oidc/start")
async def start(request: Request) -> Response:
    platform: Platform = request.app.state.platform
    if platform.oidc is None:
        return _refused(request, 404, "This platform has no identity provider configured: "
                                      "sign in with a one-time link from your administrator.")
    tenant: str | None = request.query_params.get("tenant") or None
    if tenant is not None:
        try:
            tenant = TenantId.parse(tenant).value
        except ValueError:
            return _refused(request, 400, "That is not a tenant id.")
    flow = Flow.start(tenant)
    try:
        url = await platform.oidc.authorization_url(flow, _callback_url(platform, request))
    except SignInFailed as exc:
        return _refused(request, 400, exc.sentence)
    response = RedirectResponse(url, status_code=303, headers=HEADERS)
    response.set_cookie(FLOW_COOKIE, flow.cookie, max_age=FLOW_SECONDS,
                        **_flow_cookie_args(platform, request))
    return response


@router.get("/oidc/callback")
async def callback(request: Request) -> Response:
    platform: Platform = request.app.state.platform
    if platform.oidc is None:
        return _refused(request, 404, "This platform has no identity provider configured.")
    flow = Flow.from_cookie(request.cookies.get(FLOW_COOKIE))
    try:
        identity = await callback_identity(platform.oidc, flow, request.query_params,
                                           _callback_url(platform, request))
    except SignInFailed as exc:
        return _refused(request, 400, exc.sentence)
    assert flow is not None  # callback_identity refuses a missing or malformed one
    found = await users.sign_in_oidc(
        platform.db, identity, tenant=TenantId(flow.tenant) if flow.tenant else None)
    if found.session_id is None and not found.choices:
        return _refused(request, 403, f"No tenant has a user {identity.email} may sign in "
                                      "as (or that user signs in with another identity). "
                                      "Ask your tenant's administrator to invite you.")
    templates = request.app.state.tenant_console
    if found.session_id is None:
        page = render(templates, request, "choose_tenant.html", title="Choose a tenant",
                      tenants=[t.value for t in found.choices])
    else:
        page = render(templates, request, "signed_in.html", title="Signed in")
        page.set_cookie(SESSION_COOKIE, found.session_id, max_age=users.SESSION_SECONDS,
                        **cookie_args(platform, request))
    page.delete_cookie(FLOW_COOKIE, **_flow_cookie_args(platform, request))
    return page
