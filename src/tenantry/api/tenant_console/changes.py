"""Recording a console change in the tenant's audit trail: what ``ChangeRecorder``
(api/audit_trail.py) writes for a key's request, written here for a person's, since a
console page has no key grant for the middleware to read. The actor is ``user:<id>``, the
action the console route (``POST /app/…``), the target the path posted to.

As the recorder does, the entry is written after the change committed, and a failure to
write it is logged, never raised: the change is made and its answer must go out."""

from __future__ import annotations

import logging

from tenantry.api.tenant_console.view import Page
from tenantry.audit import trail

logger = logging.getLogger(__name__)

__all__ = ["record"]


async def record(v: Page, route: str, status: int = 303) -> None:
    """Record the change the person just made by ``route`` (e.g. ``POST /app/keys``)."""
    tenant, path = v.member.tenant, v.request.url.path
    try:
        await trail.record_change(v.db, tenant, trail.Change(v.member.actor, route, path,
                                                             status))
    # Not BaseException: a cancelled request stays cancelled.
    except Exception as exc:
        logger.error("audit: could not record %s %s for %s: %s", route, path, tenant, exc)
