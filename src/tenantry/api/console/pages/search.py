"""The console's search: ``GET /console/search?q=`` finds tenants (id or name prefix), a run
or task by id, runs by idempotency key and agents (id, or name prefix), across tenants — the
operator's cross-tenant view, behind the operator session like every console page. A query
that can match nothing (a NUL, control characters, longer than any key) is answered with
an empty result and a note, never an error."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import Response

from tenantry.api.console import find
from tenantry.api.console.view import SignedInPage

router = APIRouter()


@router.get("/search")
async def search(v: SignedInPage) -> Response:
    # One value, as the browser's form sends it; a repeated q= keeps the first.
    text = (v.request.query_params.get("q") or "").strip()
    found: find.Found | None = None
    note = find.problem(text) if text else None
    if text and note is None:
        found = await find.search(v.console_db, v.db, text)
        if found.more_tenants:
            note = (f"Searched the first {found.scanned:,} tenants by id; the cell has more, "
                    "which this search did not read.")
    # An ill-formed query is not written back into the page (it may be megabytes, or NULs).
    return v.render("search.html", title="Search", q=text if found is not None else "",
                    found=found, note=note, kinds=find.KINDS, each=find.EACH)
