"""What every tenant console page shares: its templates (loaded once, in
``app.state.tenant_console``), the signed-in person (`member`: a `Page` for a request
with a live session, or the signed-out page), and the ways to answer — with the operator
console's headers (the same Content-Security-Policy: nothing fetched from elsewhere, no
inline script or style).

A page checks the person's role with the same `Scope` values a key meets on the API
(`Page.may`); a POST also needs the session's CSRF token (`Page.csrf_ok`). A page's
dependency does both (``v: RunsPage``, ``v: KeysForm``, declared at the end)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import Depends, Request
from fastapi.responses import HTMLResponse
from jinja2 import Environment

from tenantry.api.console import filters
from tenantry.api.console.session import same
from tenantry.api.console.view import (
    HEADERS,
    LoginRequired,
    away_context,
    away_headers,
    guarded,
    secure_cookies,
    text,
)
from tenantry.api.platform import Platform
from tenantry.db import Database
from tenantry.tenants import users
from tenantry.tenants.scopes import Scope

PREFIX = "/app"
SESSION_COOKIE = "tenantry_app"
#: Before sign-in: the double-submit value guarding the sign-in form (as the operator
#: console's login form is guarded), so no other site can sign a browser in as someone.
SIGN_IN_COOKIE = "tenantry_app_sign_in"

__all__ = ["PREFIX", "SESSION_COOKIE", "SIGN_IN_COOKIE", "Page", "cookie_args", "database_away",
           "load", "member", "render", "text"]


def load() -> Environment:
    return filters.environment("tenantry.api.tenant_console")


def render(templates: Environment, request: Request, name: str, *, status: int = 200,
           member: users.Member | None = None, **context: Any) -> HTMLResponse:
    oidc = request.app.state.platform.oidc  # the sign-in pages offer it when configured
    html = templates.get_template(name).render(
        member=member, csrf=member.csrf if member else "", path=request.url.path,
        Scope=Scope, oidc_name=oidc.name if oidc is not None else None, **context)
    return HTMLResponse(html, status_code=status, headers=HEADERS)


def database_away(request: Request) -> HTMLResponse:
    """The tenant console's page while the database is not answering (see the operator
    console's `~tenantry.api.console.view.database_away`)."""
    page = render(request.app.state.tenant_console, request, "error.html", status=503,
                  **away_context(request))
    page.headers.update(away_headers())
    return page


def cookie_args(platform: Platform, request: Request) -> dict[str, Any]:
    return {"httponly": True, "samesite": "strict",
            "secure": secure_cookies(platform, request), "path": PREFIX}


@dataclass(frozen=True, slots=True)
class Page:
    """One request from a signed-in person of a tenant."""

    templates: Environment
    platform: Platform
    request: Request
    member: users.Member

    @property
    def db(self) -> Database:
        return self.platform.db

    def may(self, scope: Scope) -> bool:
        return self.member.may(scope)

    def render(self, name: str, *, status: int = 200, **context: Any) -> HTMLResponse:
        return render(self.templates, self.request, name, status=status, member=self.member,
                      **context)

    def csrf_ok(self, form: Mapping[str, Any]) -> bool:
        given = form.get("csrf")
        return isinstance(given, str) and same(given, self.member.csrf)

    def error(self, status: int, title: str, message: str) -> HTMLResponse:
        return self.render("error.html", status=status, title=title, message=message)

    def forbidden(self) -> HTMLResponse:
        return self.error(403, "Form refused",
                          "This form carried no valid CSRF token (it may be from an older "
                          "session). Reload the page and try again.")

    def not_allowed(self, scope: Scope) -> HTMLResponse:
        return self.error(403, "Not allowed",
                          f"Your role ({self.member.role}) does not hold {scope.value}.")

    def not_found(self, what: str) -> HTMLResponse:
        return self.error(404, "Not found", what)


async def member(request: Request) -> Page:
    """The page's `Page`; without a live session, the signed-out page (401)."""
    templates: Environment = request.app.state.tenant_console
    platform: Platform = request.app.state.platform
    found = await users.session(platform.db, request.cookies.get(SESSION_COOKIE))
    if found is None:
        raise LoginRequired(render(templates, request, "signed_out.html", status=401,
                                   title="Sign in"))
    return Page(templates, platform, request, found)


#: The `Page` of a person whose role holds the scope: to see a page, or to post a form.
RunsPage = Annotated[Page, Depends(guarded(member, Scope.RUNS_READ, form=False))]
AuditPage = Annotated[Page, Depends(guarded(member, Scope.AUDIT_READ, form=False))]
KeysPage = Annotated[Page, Depends(guarded(member, Scope.KEYS_MANAGE, form=False))]
AgentsForm = Annotated[Page, Depends(guarded(member, Scope.AGENTS_MANAGE, form=True))]
ApprovalsForm = Annotated[Page, Depends(guarded(member, Scope.APPROVALS_DECIDE, form=True))]
KeysForm = Annotated[Page, Depends(guarded(member, Scope.KEYS_MANAGE, form=True))]
IntegrationsForm = Annotated[Page, Depends(guarded(member, Scope.INTEGRATIONS_MANAGE, form=True))]
