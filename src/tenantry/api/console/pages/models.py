"""The model accounts page: registered and configured accounts, and each in-process
worker's breaker states."""

from __future__ import annotations

from urllib.parse import urlencode

from fastapi import APIRouter
from fastapi.responses import Response

from tenantry.api.console import find, reads, workers
from tenantry.api.console.view import PREFIX, SignedInPage
from tenantry.ids import TenantId
from tenantry.models import accounts

router = APIRouter()


@router.get("/models")
async def models(v: SignedInPage) -> Response:
    after_text = (v.request.query_params.get("after") or "").strip()
    try:
        after = accounts.parse_account_id(after_text) if after_text else None
    except ValueError:
        after = None
    # The same pages as GET /admin/v1/model-accounts.
    registered = await accounts.accounts_page(v.db, tenant=None, after=after,
                                              limit=reads.PAGE)
    more = (f"{PREFIX}/models?{urlencode({'after': registered[-1].account_id})}"
            if len(registered) == reads.PAGE else None)
    local = workers.breakers(v.platform.local)
    seen = {a.account_id for a in registered}
    configured = []  # accounts from configuration, known only to the workers
    for w in (local or []) if after is None else []:
        for account in w.accounts:
            if account.account_id not in seen:
                seen.add(account.account_id)
                configured.append(account)
    shown = [*registered, *configured]
    names = await find.names_of(v.db, [(TenantId(a.tenant), None) for a in shown if a.tenant])
    return v.render("models.html", title="Model accounts", names=names,
                    accounts=shown, workers=local, more=more)
