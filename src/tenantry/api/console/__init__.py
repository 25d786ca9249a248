"""The operator console: server-rendered pages at ``/console`` (docs/how-to/console.md).

Pages are plain HTML with a small script for the live parts (the runs list re-fetches its
rows; a run page follows the run's event stream over SSE and re-fetches its changing
parts as events arrive). One module per page under
``pages/``; what they share is in view.py."""

from __future__ import annotations

from fastapi import FastAPI

from tenantry.api.console.pages import (
    actions,
    activities,
    approvals,
    assets,
    billing,
    charts,
    evaluation,
    login,
    models,
    payloads,
    run,
    runs,
    sandboxes,
    search,
    sign_in,
    tenants,
    tool_servers,
)
from tenantry.api.console.view import PREFIX, Answered, Console, answered, database_away
from tenantry.api.problems import answer_outages_with

__all__ = ["Console", "install"]

_PAGES = (assets, login, sign_in, runs, run, payloads, approvals, tenants, tool_servers, models,
          billing, sandboxes, activities, actions, search, charts, evaluation)


def install(app: FastAPI) -> None:
    """Mount the console's pages on ``app``, with its templates and assets loaded once."""
    app.state.console = Console.load()
    app.add_exception_handler(Answered, answered)
    answer_outages_with(app, PREFIX, database_away)
    for page in _PAGES:
        app.include_router(page.router, prefix=PREFIX, include_in_schema=False)
