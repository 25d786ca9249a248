"""The tenant console: server-rendered pages at ``/app`` for a tenant's people (ADR 0043
§5-6, docs/how-to/tenant-account.md). A person signs in with a one-time link or by OpenID
Connect and sees their own tenant only — its runs, a run's events and trace, the
approvals inbox, its agents (versions, evaluations, promotion), tool servers (Connect),
usage against its caps, API keys, the audit trail — as far as their role's scopes allow;
a change made here is recorded in the audit trail as the API's would be (changes.py).
Same standards as the operator console (api/console/): its headers, stylesheet and script
(a run's page follows the run live; without script every page is whole), CSRF on every
POST. One module per page under ``pages/``; what they share
is in view.py."""

from __future__ import annotations

from fastapi import FastAPI

from tenantry.api.console.pages import assets
from tenantry.api.problems import answer_outages_with
from tenantry.api.tenant_console.pages import (
    agents,
    approvals,
    audit,
    keys,
    oidc,
    runs,
    sign_in,
    tool_servers,
    usage,
)
from tenantry.api.tenant_console.view import PREFIX, database_away, load

__all__ = ["install"]

_PAGES = (sign_in, oidc, runs, agents, approvals, tool_servers, usage, keys, audit)


def install(app: FastAPI) -> None:
    """Mount the tenant console on ``app`` (after the operator console: it shares its
    static assets, served here under ``/app/static`` too)."""
    app.state.tenant_console = load()
    answer_outages_with(app, PREFIX, database_away)
    app.include_router(assets.router, prefix=PREFIX, include_in_schema=False)
    for page in _PAGES:
        app.include_router(page.router, prefix=PREFIX, include_in_schema=False)
