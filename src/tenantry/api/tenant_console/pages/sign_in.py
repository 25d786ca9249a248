"""Signing in with a one-time link, and signing out.

Opening the link shows a page with one button: a link-preview bot or a mail scanner that
fetches the URL does not use it up; the person's POST does (once, within 15 minutes)."""

from __future__ import annotations

import secrets

from fastapi import APIRouter, Depends, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from tenantry.api.console.session import same
from tenantry.api.console.view import HEADERS
from tenantry.api.platform import Platform
from tenantry.api.tenant_console.view import (
    PREFIX,
    SESSION_COOKIE,
    SIGN_IN_COOKIE,
    Page,
    cookie_args,
    member,
    render,
    text,
)
from tenantry.tenants import users

router = APIRouter()
_MAX_TOKEN = 100


def _page(request: Request, token: str, *, status: int = 200,
          error: str | None = None) -> HTMLResponse:
    platform: Platform = request.app.state.platform
    nonce = secrets.token_hex(16)
    response = render(request.app.state.tenant_console, request, "sign_in.html",
                      status=status, title="Sign in", token=token, sign_in_csrf=nonce,
                      error=error)
    response.set_cookie(SIGN_IN_COOKIE, nonce, max_age=users.LINK_SECONDS,
                        **cookie_args(platform, request))
    return response


@router.get("/sign-in")
async def confirm(request: Request) -> Response:
    token = request.query_params.get("token", "")[:_MAX_TOKEN]
    return _page(request, token)


@router.post("/sign-in")
async def sign_in(request: Request) -> Response:
    platform: Platform = request.app.state.platform
    form = await request.form()
    token = text(form.get("token"))[:_MAX_TOKEN]
    if not same(text(form.get("csrf")), request.cookies.get(SIGN_IN_COOKIE)):
        return _page(request, token, status=403,
                     error="The sign-in form expired; press the button again.")
    session_id = await users.sign_in(platform.db, token)
    if session_id is None:
        refused = render(request.app.state.tenant_console, request, "link_refused.html",
                         status=410, title="This link cannot be used")
        refused.delete_cookie(SIGN_IN_COOKIE, **cookie_args(platform, request))
        return refused
    response = RedirectResponse(PREFIX, status_code=303, headers=HEADERS)
    response.set_cookie(SESSION_COOKIE, session_id, max_age=users.SESSION_SECONDS,
                        **cookie_args(platform, request))
    response.delete_cookie(SIGN_IN_COOKIE, **cookie_args(platform, request))
    return response


@router.post("/sign-out")
async def sign_out(v: Page = Depends(member)) -> Response:
    if not v.csrf_ok(await v.request.form()):
        return v.forbidden()
    await users.sign_out(v.db, v.member)  # the session ends here, not just in this browser
    response = render(v.templates, v.request, "signed_out.html", title="Signed out",
                      signed_out=True)
    response.delete_cookie(SESSION_COOKIE, **cookie_args(v.platform, v.request))
    return response
