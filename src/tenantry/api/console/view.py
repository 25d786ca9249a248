"""What every console page shares: the `Console` (templates and assets, loaded once, kept
in ``app.state.console``) and the view of one request a page handler gets as a dependency:
`signed_in` (a `SignedIn`, or the redirect to the login page) or `view` (a `View`, signed in
or not): the platform, the operator's session, and the ways to answer.

Every page needs the session cookie (see session.py); every POST also needs the form's
CSRF token. Nothing is fetched from anywhere but this server: the Content-Security-Policy
says so to the browser."""

from __future__ import annotations

import re
import secrets
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from importlib import resources
from typing import Annotated, Any, Protocol, TypeVar
from urllib.parse import urlencode, urlsplit

from fastapi import Depends, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from jinja2 import Environment

from tenantry.api.console import epoch, filters, operators
from tenantry.api.console.action_log import session_actor
from tenantry.api.console.operators import Operator, Role
from tenantry.api.console.session import SESSION_COOKIE, Session, same, verify
from tenantry.api.platform import Platform
from tenantry.api.problems import DATABASE_RETRY_AFTER
from tenantry.db import Database
from tenantry.ids import OperatorId, TenantId

PREFIX = "/console"
_CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
        "connect-src 'self'; form-action {}; frame-ancestors 'none'; base-uri 'none'")
HEADERS = {
    # Only this server, ever: no CDN, no web fonts, no inline script or style.
    "Content-Security-Policy": _CSP.format("'self'"),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    "Cache-Control": "no-store",
}
#: A host (name, IPv4 or bracketed IPv6) and port: no userinfo, nothing a header could split on.
_NETLOC = re.compile(r"[A-Za-z0-9.-]+(:[0-9]{1,5})?|\[[0-9A-Fa-f:.]+\](:[0-9]{1,5})?")
STATIC = {"console.css": "text/css; charset=utf-8", "charts.css": "text/css; charset=utf-8",
          "console.js": "text/javascript; charset=utf-8",
          "favicon.svg": "image/svg+xml"}


def form_action(urls: Iterable[str]) -> dict[str, str]:
    """The console's headers, its forms also allowed to lead to the origins of ``urls``:
    browsers apply ``form-action`` to the redirects that follow a form's post too, so a
    form the console answers with a redirect elsewhere (an OAuth tool server's Connect, to
    its authorization server) needs that origin named. A URL that is not a plain http(s)
    origin adds nothing (it could not carry a directive into the header either)."""
    origins = sorted({o for o in map(_origin, urls) if o is not None})
    if not origins:
        return HEADERS
    return {**HEADERS,
            "Content-Security-Policy": _CSP.format(" ".join(["'self'", *origins]))}


def _origin(url: str) -> str | None:
    try:
        parts = urlsplit(url)
    except ValueError:  # a malformed bracketed host
        return None
    if parts.scheme not in ("http", "https") or not _NETLOC.fullmatch(parts.netloc):
        return None
    return f"{parts.scheme}://{parts.netloc.lower()}"


@dataclass(frozen=True, slots=True)
class Console:
    """Loaded once per app (no globals): the templates, the static assets and their ETag."""

    templates: Environment
    assets: dict[str, bytes]
    etag: str  # per process start: assets change only with the code

    @classmethod
    def load(cls) -> Console:
        folder = resources.files("tenantry.api.console").joinpath("static")
        return cls(filters.environment(),
                   {name: folder.joinpath(name).read_bytes() for name in STATIC},
                   secrets.token_hex(8))


@dataclass(frozen=True, slots=True)
class View:
    """One request to the console, signed in or not."""

    console: Console
    platform: Platform
    request: Request
    session: Session | None  # None: not logged in (or the cookie is not valid)
    # Who the session is (its operator, read on this request); None: the token's holder.
    who: Operator | None = None

    @property
    def role(self) -> Role:
        """What the signed-in person may do: their role; the token's holder is an admin."""
        return self.who.role if self.who is not None else Role.ADMIN

    def may(self, needed: Role) -> bool:
        return self.session is not None and self.role.rank >= needed.rank

    @property
    def db(self) -> Database:
        return self.platform.db

    @property
    def console_db(self) -> Database:
        """For the cross-tenant pages only: the pool that may call the console's functions."""
        return self.platform.cross_tenant_db

    @property
    def operator_token(self) -> str | None:
        return self.platform.settings.operator_token

    def render(self, name: str, *, status: int = 200, form_origins: Iterable[str] = (),
               **context: Any) -> HTMLResponse:
        """A template, with the session's CSRF token (and so the signed-in header) if any.
        ``form_origins``: where else the page's forms may lead (see `form_action`)."""
        csrf = self.session.csrf(self.operator_token or "") if self.session else ""
        html = self.console.templates.get_template(name).render(
            csrf=csrf, path=self.request.url.path, who=self.who, may=self.may, Role=Role,
            oidc_name=self.platform.oidc.name if self.platform.oidc is not None else None,
            **context)
        return HTMLResponse(html, status_code=status, headers=form_action(form_origins))

    def to_login(self) -> RedirectResponse:
        url = self.request.url
        target = url.path + (f"?{url.query}" if url.query else "")
        return RedirectResponse(f"{PREFIX}/login?{urlencode({'next': target})}",
                                status_code=303, headers=HEADERS)

    def cookie_args(self) -> dict[str, Any]:
        return {"httponly": True, "samesite": "strict", "secure": self.secure_cookies,
                "path": PREFIX}

    @property
    def secure_cookies(self) -> bool:
        return secure_cookies(self.platform, self.request)


def secure_cookies(platform: Platform, request: Request) -> bool:
    """Whether a console's cookies (the operator's, and the tenant console's) are Secure.
    auto: whenever the console is reached over https (directly or via a proxy uvicorn
    trusts). Behind a TLS proxy uvicorn does not trust, the request looks like plain http:
    TENANTRY_CONSOLE_SECURE_COOKIE=true keeps the cookies off plain http."""
    setting = platform.settings.console_secure_cookie
    if setting == "auto":
        return request.url.scheme == "https"
    return setting == "true"


@dataclass(frozen=True, slots=True)
class SignedIn(View):
    """A request from a signed-in operator: what every page but the login page takes."""

    session: Session

    def csrf_ok(self, form: Mapping[str, Any]) -> bool:
        given = form.get("csrf")
        return isinstance(given, str) and same(given, self.session.csrf(self.operator_token or ""))

    @property
    def actor(self) -> str:
        """Who acted, on the Actions page: the operator, or the token's session."""
        if self.who is not None:
            return self.who.actor
        return session_actor(self.session.ident)

    def not_allowed(self, needed: Role) -> HTMLResponse:
        return self.render("error.html", status=403, title="Not allowed",
                           message=f"Your role ({self.role}) may not do this: it needs "
                                   f"{needed} or above.")

    def forbidden(self) -> HTMLResponse:
        return self.render("error.html", status=403, title="Form refused",
                           message="This form carried no valid CSRF token (it may be from an "
                                   "older session). Reload the page and try again.")

    def not_found(self, what: str) -> HTMLResponse:
        return self.render("error.html", status=404, title="Not found", message=what)


def database_away(request: Request) -> HTMLResponse:
    """The page any console request gets while the database is not answering (503 with
    Retry-After, as the API's problem says), not the API's problem+json."""
    console: Console = request.app.state.console
    html = console.templates.get_template("error.html").render(
        csrf="", path=request.url.path, who=None, may=lambda _needed: False, Role=Role,
        oidc_name=None, **away_context(request))
    return HTMLResponse(html, status_code=503, headers=away_headers())


def away_context(request: Request) -> dict[str, Any]:
    """What both consoles' error page says while the database is away: a page read again
    by itself (a GET) until the database answers; a form to send again."""
    seconds = DATABASE_RETRY_AFTER
    if request.method in ("GET", "HEAD"):
        return {"title": "Database unavailable", "refresh": seconds,
                "message": f"The database is unavailable; retrying every {seconds} s …"}
    return {"title": "Database unavailable",
            "message": "The database is unavailable, so this form was not handled. Go back "
                       f"and send it again in {seconds} s or so."}


def away_headers() -> dict[str, str]:
    return {**HEADERS, "Retry-After": str(DATABASE_RETRY_AFTER)}


class Answered(Exception):
    """Raised by a page's dependency that answers the request itself (a redirect to the
    login page, a refused form): ``response`` is the answer (see install in __init__.py)."""

    def __init__(self, response: Response) -> None:
        super().__init__("answered by the page's dependency")
        self.response = response


class LoginRequired(Answered):
    """Raised by `signed_in` without a valid session; ``response`` is the redirect to the
    login page."""


async def answered(_request: Request, exc: Exception) -> Response:
    assert isinstance(exc, Answered)
    return exc.response


async def console_of(request: Request) -> Console:
    # async on purpose: FastAPI runs a plain-def dependency in a worker thread per request.
    found: Console = request.app.state.console
    return found


async def view(request: Request) -> View:
    platform: Platform = request.app.state.platform
    cookie = request.cookies.get(SESSION_COOKIE)
    token = platform.settings.operator_token
    # The epoch is read only for a request that carries a cookie to check against it.
    found = (verify(cookie, token, epoch=await epoch.current(platform.db))
             if cookie and token else None)
    who = None
    if found is not None and found.operator is not None:
        try:
            who = await operators.signed_in(platform.cross_tenant_db,
                                            OperatorId.parse(found.operator))
        except ValueError:
            who = None
        if who is None:  # disabled since, or a forged id under a valid MAC: nobody
            found = None
    return View(request.app.state.console, platform, request, found, who)


async def signed_in(request: Request) -> SignedIn:
    """The page's `SignedIn` view; without a session, the redirect to the login page (that
    comes back here once logged in)."""
    v = await view(request)
    if v.session is None:
        raise LoginRequired(v.to_login())
    return SignedIn(v.console, v.platform, v.request, v.session, v.who)


class Guarded(Protocol):
    """A console's view of a request, as `guarded` checks it (either console's)."""

    def csrf_ok(self, form: Mapping[str, Any]) -> bool: ...
    def may(self, needed: Any) -> bool: ...
    def forbidden(self) -> HTMLResponse: ...
    def not_allowed(self, needed: Any) -> HTMLResponse: ...


G = TypeVar("G", bound=Guarded)


def guarded(view: Callable[[Request], Awaitable[G]], needed: object, *,
            form: bool) -> Callable[[Request], Awaitable[G]]:
    """A page's dependency: ``view``'s answer once it `may` ``needed`` (else its
    `not_allowed` page) — for a form's POST (``form``), once the form carries the session's
    CSRF token first (else its `forbidden` page). The handler reads the same form again."""

    async def dependency(request: Request) -> G:
        v = await view(request)
        if form and not v.csrf_ok(await request.form()):
            raise Answered(v.forbidden())
        if not v.may(needed):
            raise Answered(v.not_allowed(needed))
        return v

    return dependency


#: The view of a page any signed-in operator sees.
SignedInPage = Annotated[SignedIn, Depends(signed_in)]
#: The view of a form's POST, by the roles that may post it (its CSRF token checked first).
SignedInForm = Annotated[SignedIn, Depends(guarded(signed_in, Role.READ_ONLY, form=True))]
SupportForm = Annotated[SignedIn, Depends(guarded(signed_in, Role.SUPPORT, form=True))]
AdminForm = Annotated[SignedIn, Depends(guarded(signed_in, Role.ADMIN, form=True))]


def parse_id(kind: Any, text: str | None) -> Any:
    """A typed id from a query parameter; None when absent, ValueError when malformed."""
    if not text:
        return None
    return kind.parse(text.strip())


def id_or_none(kind: Any, text: str | None) -> Any:
    """A typed id from a query parameter a page may do without (a position in a list, the
    item just changed): None when absent or malformed."""
    try:
        return parse_id(kind, text)
    except ValueError:
        return None


def tenant_filter(given: str | None) -> tuple[TenantId | None, str | None]:
    """The tenant a cross-tenant page is narrowed to (its ``tenant`` query parameter), and
    the note to show when that names no tenant: the page then shows every tenant."""
    try:
        return parse_id(TenantId, given), None
    except ValueError:
        return None, "No such tenant; showing every tenant."


def text(value: Any) -> str:
    """A form field as text: "" when absent or a file."""
    return value if isinstance(value, str) else ""
