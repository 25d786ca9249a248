"""Logging in with the operator token, logging out, and ``/console`` itself (the runs)."""

from __future__ import annotations

import secrets
from dataclasses import replace

from fastapi import APIRouter, Depends
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from tenantry.api.console import epoch, session
from tenantry.api.console.view import (
    HEADERS,
    PREFIX,
    AdminForm,
    SignedInForm,
    View,
    text,
    view,
)

router = APIRouter()


@router.get("")
async def root() -> RedirectResponse:
    return RedirectResponse(f"{PREFIX}/runs", status_code=303)


def _login_page(v: View, *, status: int = 200, error: str | None = None,
                next_: str = "") -> HTMLResponse:
    # Before login there is no session to bind a CSRF token to: a double-submit cookie
    # (the same random value in a SameSite=Strict cookie and in the form) stands in.
    nonce = secrets.token_hex(16)
    # Shown signed out even to a valid cookie (a failed re-login): no header, no nav.
    response = replace(v, session=None).render("login.html", status=status, error=error,
                                                login_csrf=nonce, next=next_)
    response.set_cookie(session.LOGIN_COOKIE, nonce, max_age=1800, **v.cookie_args())
    return response


@router.get("/login")
async def login_form(v: View = Depends(view)) -> Response:
    if v.session is not None:
        return RedirectResponse(f"{PREFIX}/runs", status_code=303)
    return _login_page(v, next_=_safe_next(v.request.query_params.get("next")))


@router.post("/login")
async def login(v: View = Depends(view)) -> Response:
    form = await v.request.form()
    next_ = _safe_next(text(form.get("next")))
    if not session.same(text(form.get("csrf")), v.request.cookies.get(session.LOGIN_COOKIE)):
        return _login_page(v, status=403, next_=next_,
                           error="The login form expired; please try again.")
    token = v.platform.settings.operator_token  # the sessions' key, whatever token logs in
    if token is None or not await v.platform.operator_tokens.valid(text(form.get("token"))):
        return _login_page(v, status=401, next_=next_,
                           error="That is not the operator token.")
    cookie, _ = session.issue(token, epoch=await epoch.current(v.db))
    response = RedirectResponse(next_ or f"{PREFIX}/runs", status_code=303, headers=HEADERS)
    response.set_cookie(session.SESSION_COOKIE, cookie, max_age=session.SESSION_SECONDS,
                        **v.cookie_args())
    response.delete_cookie(session.LOGIN_COOKIE, **v.cookie_args())
    return response


@router.post("/logout")
async def logout(v: SignedInForm) -> Response:
    # The cookie is the whole session: the browser forgets it. (A copy taken before
    # logout stays valid until it expires; "sign out everywhere" below ends them all.)
    response = RedirectResponse(f"{PREFIX}/login", status_code=303, headers=HEADERS)
    response.delete_cookie(session.SESSION_COOKIE, **v.cookie_args())
    return response


@router.post("/logout/everywhere")
async def logout_everywhere(v: AdminForm) -> Response:
    """Revoke every console session (this one, other browsers', any copied cookie): the
    session epoch moves on, as POST /admin/v1/sessions/revoke does."""
    await epoch.revoke_all(v.db)
    response = RedirectResponse(f"{PREFIX}/login", status_code=303, headers=HEADERS)
    response.delete_cookie(session.SESSION_COOKIE, **v.cookie_args())
    return response


def _safe_next(value: str | None) -> str:
    """Only a console path of this server (never //host or a scheme): no open redirect."""
    if value and value.startswith(PREFIX + "/") and not value.startswith("//") \
            and "\\" not in value and "\n" not in value and "\r" not in value:
        return value
    return ""
