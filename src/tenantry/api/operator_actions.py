"""The operator API's changes in the operator's action log (``console/action_log.py``, the
console's Actions page): every request to ``/admin/v1`` other than a read, made with the
operator token, as ``operator API`` — the route (``POST /admin/v1/model-accounts``), the
tenant its path names (none for a platform-wide route), the path, and the status it was
answered. Decided by the route Starlette matched, as ``ChangeRecorder`` decides the tenant's
trail: a new operator route is recorded by existing, with no code of its own.

Refused requests (4xx) are recorded too, with their status, as the console records its
refused actions: who tried what is the log's point (a key for a tenant that does not exist,
a price refused), and a refusal there came from the holder of the operator token. A request
that never showed the token (401, or a body refused before the token was checked) is
nobody's action and is not recorded, so no anonymous caller can fill the log. A 5xx is
recorded as failed: the operator tried, and whether anything changed is for them to check.

Written before the answer goes out (the client that saw it can find the entry; a crash in
between loses it, never invents one), through the console's pool: the table spans tenants.
Never the body: it may hold a secret."""

from __future__ import annotations

import logging

from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Send
from starlette.types import Scope as AsgiScope

from tenantry.api.console import action_log
from tenantry.api.platform import Platform
from tenantry.ids import TenantId

logger = logging.getLogger(__name__)

PREFIX = "/admin/v1/"
READS = ("GET", "HEAD", "OPTIONS")
#: ``request.state`` keys: the operator token was accepted (``auth.operator``); the tenant a
#: route acts on whose path names none (``names_tenant``).
OPERATOR = "operator"
ACTED_ON = "operator_tenant"


def route_of(scope: AsgiScope) -> str | None:
    """``METHOD /path/{template}`` of the route Starlette matched; None when none did."""
    template = getattr(scope.get("route"), "path_format", None)
    return f"{scope['method']} {template}" if isinstance(template, str) else None


def names_tenant(request: Request, tenant: TenantId) -> None:
    """Say which tenant a route acts on when its path names none (creating a tenant): the
    handler knows it, and the body that says it holds a secret the recorder must not read."""
    setattr(request.state, ACTED_ON, tenant)


def outcome(status: int) -> str:
    word = "done" if status < 400 else "refused" if status < 500 else "failed"
    return f"{word} ({status})"


class OperatorActionRecorder:
    """ASGI middleware recording each operator API change in the action log (module doc)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: AsgiScope, receive: Receive, send: Send) -> None:
        if (scope["type"] != "http" or scope["method"] in READS
                or not scope["path"].startswith(PREFIX)):
            await self.app(scope, receive, send)
            return

        async def answer(message: Message) -> None:
            if message["type"] == "http.response.start":
                await _record(scope, message["status"])
            await send(message)

        await self.app(scope, receive, answer)


def _tenant(scope: AsgiScope) -> TenantId | None:
    state = scope.get("state", {})
    named = state.get(ACTED_ON)
    if isinstance(named, TenantId):
        return named
    try:
        return TenantId.parse(str(scope.get("path_params", {})["tenant_id"]))
    except (KeyError, ValueError):  # a platform-wide route, or no tenant id at all (a 404)
        return None


async def _record(scope: AsgiScope, status: int) -> None:
    action = route_of(scope)
    if action is None or not scope.get("state", {}).get(OPERATOR):
        return
    tenant = _tenant(scope)
    p: Platform = scope["app"].state.platform
    try:
        await action_log.record(p.cross_tenant_db, actor=action_log.OPERATOR_API,
                                action=action, tenant=tenant, target=scope["path"],
                                outcome=outcome(status))
    # Whatever failed (an asyncpg error, a console login not made yet), the request is done
    # and its answer must go out: say the entry went unrecorded. Not BaseException: a
    # cancelled request stays cancelled.
    except Exception as exc:
        logger.error("action log: could not record %s %s for %s: %s", action,
                     scope["path"], tenant or "the platform", exc)
