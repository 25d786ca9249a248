"""The operator console's routes: server-rendered pages under ``/console``.

Every page needs the session cookie (see session.py); every POST also needs the form's
CSRF token. Pages are plain HTML with a small script for the live parts (the runs list
re-fetches its rows; a run page follows the run's event stream over SSE). Nothing is
fetched from anywhere but this server: the Content-Security-Policy says so to the browser."""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from datetime import UTC, datetime
from importlib import resources
from typing import Any
from urllib.parse import urlencode

import orjson
from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from jinja2 import Environment, PackageLoader, StrictUndefined, select_autoescape
from starlette.responses import StreamingResponse

from tenantry.api import runs as runs_api
from tenantry.api.console import reads, session, waterfall, workers
from tenantry.api.platform import Platform
from tenantry.errors import Conflict, NotFound
from tenantry.ids import AgentId, ApprovalId, RunId, TenantId
from tenantry.ledger import reconcile
from tenantry.models import accounts
from tenantry.runs import approvals, service
from tenantry.runs.events import TERMINAL_EVENTS, EventType, RunStatus

PREFIX = "/console"
_HEADERS = {
    # Only this server, ever: no CDN, no web fonts, no inline script or style.
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; "
                               "img-src 'self'; connect-src 'self'; form-action 'self'; "
                               "frame-ancestors 'none'; base-uri 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    "Cache-Control": "no-store",
}
_STATIC = {"console.css": "text/css; charset=utf-8",
           "console.js": "text/javascript; charset=utf-8",
           "favicon.svg": "image/svg+xml"}
MAX_COMMENT = 2000
BILLING_SHOWN = 100  # the newest reconciliations, grouped per account on the page
_BILLING_FIGURES = (("requests", "Requests"), ("input_tokens", "Input tokens"),
                    ("cached_input_tokens", "Cached input"),
                    ("cache_write_input_tokens", "Cache writes"),
                    ("output_tokens", "Output tokens"), ("cost_micros", "Cost"))
MAX_SHOWN_JSON = 4096


def _platform(request: Request) -> Platform:
    p: Platform = request.app.state.platform
    return p


def _session(request: Request) -> session.Session | None:
    return session.verify(request.cookies.get(session.SESSION_COOKIE),
                          _platform(request).settings.operator_token)


def _to_login(request: Request) -> RedirectResponse:
    target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
    return RedirectResponse(f"{PREFIX}/login?{urlencode({'next': target})}", status_code=303,
                            headers=_HEADERS)


def _cookie_args(request: Request) -> dict[str, Any]:
    # Secure whenever the console is reached over https (directly or via a proxy uvicorn
    # trusts); plain http only makes sense on loopback in development.
    return {"httponly": True, "samesite": "strict", "secure": request.url.scheme == "https",
            "path": PREFIX}


def _micros(value: int | None) -> str:
    if value is None:
        return "—"
    sign = "-" if value < 0 else ""
    value = abs(value)
    return f"{sign}${value // 1_000_000:,}.{value % 1_000_000:06d}"


def _ts(value: datetime | None) -> str:
    if value is None:
        return "—"
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S")


def _pretty(value: Any) -> str:
    text = orjson.dumps(value, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS).decode()
    return text if len(text) <= MAX_SHOWN_JSON else text[:MAX_SHOWN_JSON] + "\n… (truncated)"


def _compact(value: Any, limit: int = 160) -> str:
    text = orjson.dumps(value).decode()
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _ms(value: float) -> str:
    return f"{value / 1000:.2f} s" if value >= 1000 else f"{value:.1f} ms"


def _templates() -> Environment:
    env = Environment(loader=PackageLoader("tenantry.api.console", "templates"),
                      autoescape=select_autoescape(default=True, default_for_string=True),
                      undefined=StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    env.filters.update(usd=_micros, ts=_ts, pretty=_pretty, compact=_compact, ms=_ms)
    return env


def _static() -> dict[str, bytes]:
    folder = resources.files("tenantry.api.console").joinpath("static")
    return {name: folder.joinpath(name).read_bytes() for name in _STATIC}


def _parse(kind: Any, text: str | None) -> Any:
    """A typed id from a query parameter; None when absent, ValueError when malformed."""
    if not text:
        return None
    return kind.parse(text.strip())


def build_router() -> APIRouter:
    """The console's routes; templates and assets are loaded once, here (no globals)."""
    env = _templates()
    static = _static()
    etag = secrets.token_hex(8)  # per process start: assets change only with the code
    router = APIRouter(prefix=PREFIX, include_in_schema=False)

    def render(request: Request, name: str, sess: session.Session | None, *,
               status: int = 200, **context: Any) -> HTMLResponse:
        token = _platform(request).settings.operator_token or ""
        html = env.get_template(name).render(
            csrf=sess.csrf(token) if sess else "", path=request.url.path, **context)
        return HTMLResponse(html, status_code=status, headers=_HEADERS)

    def not_found(request: Request, sess: session.Session, what: str) -> HTMLResponse:
        return render(request, "error.html", sess, status=404, title="Not found",
                      message=what)

    def csrf_ok(request: Request, sess: session.Session, form: Mapping[str, Any]) -> bool:
        token = _platform(request).settings.operator_token or ""
        given = form.get("csrf")
        return isinstance(given, str) and session.same(given, sess.csrf(token))

    def forbidden(request: Request, sess: session.Session) -> HTMLResponse:
        return render(request, "error.html", sess, status=403, title="Form refused",
                      message="This form carried no valid CSRF token (it may be from an "
                              "older session). Reload the page and try again.")

    # -- static assets, login, logout -----------------------------------------------

    @router.get("/static/{name}")
    async def asset(name: str, request: Request) -> Response:
        body = static.get(name)
        if body is None:
            return Response(status_code=404)
        headers = {"ETag": f'"{etag}"', "Cache-Control": "private, max-age=300",
                   "X-Content-Type-Options": "nosniff"}
        if request.headers.get("if-none-match") == f'"{etag}"':
            return Response(status_code=304, headers=headers)
        return Response(body, media_type=_STATIC[name], headers=headers)

    @router.get("")
    async def root() -> RedirectResponse:
        return RedirectResponse(f"{PREFIX}/runs", status_code=303)

    def login_page(request: Request, *, status: int = 200, error: str | None = None,
                   next_: str = "") -> HTMLResponse:
        # Before login there is no session to bind a CSRF token to: a double-submit cookie
        # (the same random value in a SameSite=Strict cookie and in the form) stands in.
        nonce = secrets.token_hex(16)
        response = render(request, "login.html", None, status=status, error=error,
                          login_csrf=nonce, next=next_)
        response.set_cookie(session.LOGIN_COOKIE, nonce, max_age=1800, **_cookie_args(request))
        return response

    @router.get("/login")
    async def login_form(request: Request) -> Response:
        if _session(request) is not None:
            return RedirectResponse(f"{PREFIX}/runs", status_code=303)
        return login_page(request, next_=_safe_next(request.query_params.get("next")))

    @router.post("/login")
    async def login(request: Request) -> Response:
        form = await request.form()
        next_ = _safe_next(_text(form.get("next")))
        if not session.same(_text(form.get("csrf")), request.cookies.get(session.LOGIN_COOKIE)):
            return login_page(request, status=403, next_=next_,
                              error="The login form expired; please try again.")
        token = _platform(request).settings.operator_token
        if not session.token_matches(_text(form.get("token")), token):
            return login_page(request, status=401, next_=next_,
                              error="That is not the operator token.")
        assert token is not None  # token_matches refuses when none is configured
        cookie, _ = session.issue(token)
        response = RedirectResponse(next_ or f"{PREFIX}/runs", status_code=303,
                                    headers=_HEADERS)
        response.set_cookie(session.SESSION_COOKIE, cookie, max_age=session.SESSION_SECONDS,
                            **_cookie_args(request))
        response.delete_cookie(session.LOGIN_COOKIE, **_cookie_args(request))
        return response

    @router.post("/logout")
    async def logout(request: Request) -> Response:
        sess = _session(request)
        if sess is None:
            return _to_login(request)
        if not csrf_ok(request, sess, await request.form()):
            return forbidden(request, sess)
        # The cookie is the whole session: the browser forgets it. (A copy taken before
        # logout stays valid until it expires; rotating the operator token ends them all.)
        response = RedirectResponse(f"{PREFIX}/login", status_code=303, headers=_HEADERS)
        response.delete_cookie(session.SESSION_COOKIE, **_cookie_args(request))
        return response

    # -- runs -------------------------------------------------------------------------

    @router.get("/runs")
    async def runs_list(request: Request) -> Response:
        sess = _session(request)
        if sess is None:
            return _to_login(request)
        q = request.query_params
        filters = {"tenant": q.get("tenant", "").strip(), "status": q.get("status", ""),
                   "agent": q.get("agent", "").strip()}
        error = None
        rows: list[reads.RunRow] = []
        try:
            tenant = _parse(TenantId, filters["tenant"])
            agent = _parse(AgentId, filters["agent"])
            before = _parse(RunId, q.get("before"))
            status = RunStatus(filters["status"]) if filters["status"] else None
        except ValueError as exc:
            error = str(exc)
        else:
            rows = await reads.runs_page(_platform(request).db, tenant=tenant,
                                         status=status.value if status else None,
                                         agent=agent, before=before)
        kept = {k: v for k, v in filters.items() if v}
        older = (f"{PREFIX}/runs?{urlencode({**kept, 'before': str(rows[-1].run_id)})}"
                 if len(rows) == reads.PAGE else None)
        again = {**kept, "partial": "1"}
        if q.get("before"):
            again["before"] = q["before"]
        context: dict[str, Any] = {
            "rows": rows, "filters": filters, "error": error, "older": older,
            "statuses": [s.value for s in RunStatus],
            "refresh": f"{PREFIX}/runs?{urlencode(again)}"}
        if q.get("partial") == "1":  # the live refresh: just the table rows
            return render(request, "_run_rows.html", sess, **context)
        return render(request, "runs.html", sess, title="Runs", **context)

    @router.get("/runs/{tenant_id}/{run_id}")
    async def run_page(tenant_id: str, run_id: str, request: Request) -> Response:
        sess = _session(request)
        if sess is None:
            return _to_login(request)
        p = _platform(request)
        try:
            tenant, run = TenantId.parse(tenant_id), RunId.parse(run_id)
            found = await service.get_run(p.db, tenant, run)
        except (ValueError, NotFound):
            return not_found(request, sess, "No run with this id.")
        details = await reads.run_details(p.db, tenant, run, found.agent_id, found.last_seq)
        after = details.events[-1].seq if details.events else 0
        hidden = details.events[0].seq - 1 if details.events else 0
        return render(
            request, "run.html", sess, title=f"Run {run}", tenant=tenant, run=found,
            details=details, after=after, earlier=hidden,
            ended=found.status.terminal and any(
                e.type in TERMINAL_EVENTS for e in details.events),
            trace=waterfall.layout(details.trace) if details.trace else None,
            event_types=" ".join(t.value for t in EventType),
            terminal_types=" ".join(sorted(TERMINAL_EVENTS)),
            stream=f"{PREFIX}/runs/{tenant}/{run}/events",
            summary=f"{PREFIX}/runs/{tenant}/{run}/summary")

    @router.get("/runs/{tenant_id}/{run_id}/summary")
    async def run_summary(tenant_id: str, run_id: str, request: Request) -> Response:
        if _session(request) is None:
            return JSONResponse({"error": "log in again"}, status_code=401, headers=_HEADERS)
        try:
            tenant, run = TenantId.parse(tenant_id), RunId.parse(run_id)
            found = await service.get_run(_platform(request).db, tenant, run)
        except (ValueError, NotFound):
            return JSONResponse({"error": "no such run"}, status_code=404, headers=_HEADERS)
        return JSONResponse({
            "status": found.status.value, "steps": found.steps,
            "input_tokens": found.input_tokens, "output_tokens": found.output_tokens,
            "cost": _micros(found.cost_micros), "last_seq": found.last_seq,
        }, headers=_HEADERS)

    @router.get("/runs/{tenant_id}/{run_id}/events")
    async def run_events(tenant_id: str, run_id: str, request: Request) -> Response:
        """The run's log as SSE for the console: the tenant API's stream (same hub, same
        no-gap/no-repeat resume), authorized by the operator's session instead of a key."""
        if _session(request) is None:
            return Response("log in again", status_code=401, headers=_HEADERS)
        p = _platform(request)
        start_text = request.query_params.get("after") or request.headers.get(
            "last-event-id") or "0"
        try:
            tenant, run = TenantId.parse(tenant_id), RunId.parse(run_id)
            if not start_text.isdigit() or int(start_text) > 2**31 - 1:
                raise ValueError("after: an event seq")
            start = int(start_text)
            first = await service.read_events(p.db, tenant, run, after=start, limit=500)
        except (ValueError, NotFound):
            return Response("no such run", status_code=404, headers=_HEADERS)
        # As in the tenant API: a run that ended before `start` has nothing left to wait for.
        ended = (len(first) < 500 and not any(e.type in TERMINAL_EVENTS for e in first)
                 and (await service.get_run(p.db, tenant, run)).status.terminal)
        if ended:
            first = await service.read_events(p.db, tenant, run, after=start, limit=500)
            ended = len(first) < 500 and not any(e.type in TERMINAL_EVENTS for e in first)
        return StreamingResponse(
            runs_api.event_stream(p, tenant, run, start, first, ended=ended),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no",
                     "X-Content-Type-Options": "nosniff"})

    # -- approvals ----------------------------------------------------------------------

    @router.get("/approvals")
    async def inbox(request: Request) -> Response:
        sess = _session(request)
        if sess is None:
            return _to_login(request)
        return await render_inbox(request, sess)

    async def render_inbox(request: Request, sess: session.Session, *, status: int = 200,
                           error: str | None = None) -> HTMLResponse:
        q = request.query_params
        try:
            after = _parse(ApprovalId, q.get("after"))
        except ValueError:
            after = None
        pending = await reads.pending_approvals(_platform(request).db, after=after)
        decided = None
        try:
            decided_id = _parse(ApprovalId, q.get("decided"))
        except ValueError:
            decided_id = None
        if decided_id is not None and q.get("decision") in ("approved", "denied"):
            decided = (str(decided_id), q["decision"])
        more = (f"{PREFIX}/approvals?{urlencode({'after': str(pending[-1].approval_id)})}"
                if len(pending) == reads.PAGE else None)
        return render(request, "approvals.html", sess, status=status, title="Approvals",
                      pending=pending, decided=decided, error=error, more=more)

    @router.post("/approvals/{tenant_id}/{approval_id}")
    async def decide(tenant_id: str, approval_id: str, request: Request) -> Response:
        sess = _session(request)
        if sess is None:
            return _to_login(request)
        form = await request.form()
        if not csrf_ok(request, sess, form):
            return forbidden(request, sess)
        decision = _text(form.get("decision"))
        comment = _text(form.get("comment")).strip()[:MAX_COMMENT] or None
        if decision not in approvals.DECISIONS:
            return await render_inbox(request, sess, status=400,
                                      error="Choose approve or deny.")
        try:
            tenant, approval = TenantId.parse(tenant_id), ApprovalId.parse(approval_id)
            # The tenant API's decision path: the same checks, the same ApprovalDecided
            # event and re-queue, marked as the operator's decision.
            done = await approvals.decide(_platform(request).db, tenant, approval, decision,
                                          comment, decided_by="operator")
        except (ValueError, NotFound):
            return await render_inbox(request, sess, status=404,
                                      error="No such approval (it may have been removed).")
        except Conflict as exc:
            return await render_inbox(request, sess, status=409, error=exc.detail)
        shown = {"decided": str(done.approval_id), "decision": done.status}
        target = f"{PREFIX}/approvals?{urlencode(shown)}"
        if _text(form.get("back")) == "run":
            target = f"{PREFIX}/runs/{tenant}/{done.run_id}"
        return RedirectResponse(target, status_code=303, headers=_HEADERS)

    # -- tenants, models, sandboxes -------------------------------------------------------

    @router.get("/tenants")
    async def tenants(request: Request) -> Response:
        sess = _session(request)
        if sess is None:
            return _to_login(request)
        try:
            after = _parse(TenantId, request.query_params.get("after"))
        except ValueError:
            after = None
        rows, depth = await reads.tenants_page(_platform(request).db, after=after)
        more = (f"{PREFIX}/tenants?{urlencode({'after': rows[-1].tenant.value})}"
                if len(rows) == reads.PAGE else None)
        return render(request, "tenants.html", sess, title="Tenants", rows=rows,
                      queue_depth=depth, more=more,
                      month=datetime.now(UTC).strftime("%B %Y"))

    @router.get("/models")
    async def models(request: Request) -> Response:
        sess = _session(request)
        if sess is None:
            return _to_login(request)
        p = _platform(request)
        after_text = (request.query_params.get("after") or "").strip()
        try:
            after = accounts.parse_account_id(after_text) if after_text else None
        except ValueError:
            after = None
        # The same pages as GET /admin/v1/model-accounts.
        registered = await accounts.accounts_page(p.db, tenant=None, after=after,
                                                  limit=reads.PAGE)
        more = (f"{PREFIX}/models?{urlencode({'after': registered[-1].account_id})}"
                if len(registered) == reads.PAGE else None)
        local = workers.breakers(p.local)
        seen = {a.account_id for a in registered}
        configured = []  # accounts from configuration, known only to the workers
        for w in (local or []) if after is None else []:
            for account in w.accounts:
                if account.account_id not in seen:
                    seen.add(account.account_id)
                    configured.append(account)
        return render(request, "models.html", sess, title="Model accounts",
                      accounts=[*registered, *configured], workers=local, more=more)

    @router.get("/billing")
    async def billing(request: Request) -> Response:
        sess = _session(request)
        if sess is None:
            return _to_login(request)
        latest = await reconcile.recent(_platform(request).db, limit=BILLING_SHOWN)
        by_account: dict[str, list[reconcile.Reconciliation]] = {}
        for rec in latest:  # newest first: each account's first is its last check
            by_account.setdefault(rec.account, []).append(rec)
        return render(request, "billing.html", sess, title="Billing",
                      by_account=sorted(by_account.items()),
                      tolerance=reconcile.TOLERANCE_PERCENT, figures=_BILLING_FIGURES)

    @router.get("/sandboxes")
    async def sandboxes(request: Request) -> Response:
        sess = _session(request)
        if sess is None:
            return _to_login(request)
        return render(request, "sandboxes.html", sess, title="Sandboxes",
                      views=workers.sandboxes(_platform(request).local))

    return router


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _safe_next(value: str | None) -> str:
    """Only a console path of this server (never //host or a scheme): no open redirect."""
    if value and value.startswith(PREFIX + "/") and not value.startswith("//") \
            and "\\" not in value and "\n" not in value and "\r" not in value:
        return value
    return ""
