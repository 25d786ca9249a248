"""Operators signing in as themselves (ADR 0043 §8): by a one-time link the operator API
makes (``/console/sign-in?token=osl_…``: a page with one button, so a link preview does
not use it up), or by the OpenID Connect provider tenants' people use
(``/console/oidc/start`` and ``/console/oidc/callback``; register that callback with the
provider too). Either ends in the console's session cookie naming the operator; their role
is read on every request after (operators.py). Logging in with the operator token stays
(login.py)."""

from __future__ import annotations

import secrets
from typing import Any

from fastapi import APIRouter, Depends
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from tenantry.api.console import epoch, operators, session
from tenantry.api.console.view import HEADERS, PREFIX, View, text, view
from tenantry.tenants.oidc import FLOW_SECONDS, Flow, SignInFailed, callback_identity

router = APIRouter()
FLOW_COOKIE = "tenantry_console_oidc"
_FLOW_PATH = f"{PREFIX}/oidc"
_MAX_TOKEN = 100


def _flow_cookie_args(v: View) -> dict[str, Any]:
    # Lax, unlike every other console cookie: the callback is the provider's navigation.
    return {"httponly": True, "samesite": "lax", "path": _FLOW_PATH,
            "secure": v.secure_cookies}


def _refused(v: View, status: int, message: str) -> HTMLResponse:
    page = v.render("sign_in_failed.html", status=status, title="Sign-in failed",
                    message=message)
    page.delete_cookie(FLOW_COOKIE, **_flow_cookie_args(v))
    return page


def _signed_in(v: View, operator: operators.Operator, new_epoch: int) -> HTMLResponse:
    """The session cookie, on a page that moves on to the console by itself (a strict
    cookie set by the provider's navigation would not go with a redirect)."""
    token = v.platform.settings.operator_token
    assert token is not None  # every API process has one (bootstrap/secrets.py)
    cookie, _ = session.issue(token, epoch=new_epoch, operator=str(operator.user_id))
    page = v.render("signed_in.html", title="Signed in", operator=operator)
    page.set_cookie(session.SESSION_COOKIE, cookie, max_age=session.SESSION_SECONDS,
                    **v.cookie_args())
    return page


def _callback_url(v: View) -> str:
    base = (v.platform.settings.public_url or str(v.request.base_url)).rstrip("/")
    return f"{base}{_FLOW_PATH}/callback"


@router.get("/sign-in")
async def confirm(v: View = Depends(view)) -> Response:
    token = v.request.query_params.get("token", "")[:_MAX_TOKEN]
    nonce = secrets.token_hex(16)
    page = v.render("sign_in.html", title="Sign in", token=token, sign_in_csrf=nonce)
    page.set_cookie(session.LOGIN_COOKIE, nonce, max_age=1800, **v.cookie_args())
    return page


@router.post("/sign-in")
async def use_link(v: View = Depends(view)) -> Response:
    form = await v.request.form()
    if not session.same(text(form.get("csrf")), v.request.cookies.get(session.LOGIN_COOKIE)):
        return _refused(v, 403, "The sign-in form expired: open the link again.")
    operator = await operators.use_link(v.console_db, text(form.get("token"))[:_MAX_TOKEN])
    if operator is None:
        return _refused(v, 410, "This sign-in link was used already, has expired (links "
                                "last 15 minutes), or is not valid: ask an admin for a "
                                "new one.")
    response = RedirectResponse(f"{PREFIX}/runs", status_code=303, headers=HEADERS)
    token = v.platform.settings.operator_token
    assert token is not None
    cookie, _ = session.issue(token, epoch=await epoch.current(v.db),
                              operator=str(operator.user_id))
    response.set_cookie(session.SESSION_COOKIE, cookie, max_age=session.SESSION_SECONDS,
                        **v.cookie_args())
    response.delete_cookie(session.LOGIN_COOKIE, **v.cookie_args())
    return response


@router.get("/oidc/start")
async def oidc_start(v: View = Depends(view)) -> Response:
    if v.platform.oidc is None:
        return _refused(v, 404, "This platform has no identity provider configured: log in "
                                "with the operator token or a sign-in link.")
    flow = Flow.start()
    try:
        url = await v.platform.oidc.authorization_url(flow, _callback_url(v))
    except SignInFailed as exc:
        return _refused(v, 400, exc.sentence)
    response = RedirectResponse(url, status_code=303, headers=HEADERS)
    response.set_cookie(FLOW_COOKIE, flow.cookie, max_age=FLOW_SECONDS, **_flow_cookie_args(v))
    return response


@router.get("/oidc/callback")
async def oidc_callback(v: View = Depends(view)) -> Response:
    if v.platform.oidc is None:
        return _refused(v, 404, "This platform has no identity provider configured.")
    try:
        identity = await callback_identity(
            v.platform.oidc, Flow.from_cookie(v.request.cookies.get(FLOW_COOKIE)),
            v.request.query_params, _callback_url(v))
    except SignInFailed as exc:
        return _refused(v, 400, exc.sentence)
    operator = await operators.sign_in_oidc(v.console_db, identity)
    if operator is None:
        return _refused(v, 403, f"{identity.email} is no operator's address (or that "
                                "operator signs in with another identity): ask an admin to "
                                "invite you.")
    page = _signed_in(v, operator, await epoch.current(v.db))
    page.delete_cookie(FLOW_COOKIE, **_flow_cookie_args(v))
    return page
