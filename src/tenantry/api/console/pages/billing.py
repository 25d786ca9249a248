"""The billing page: the newest reconciliations of providers' usage, per account."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import Response

from tenantry.api.console.view import SignedInPage
from tenantry.ledger import reconcile

router = APIRouter()
SHOWN = 100  # the newest reconciliations, grouped per account on the page
_FIGURES = (("requests", "Requests"), ("input_tokens", "Input tokens"),
            ("cached_input_tokens", "Cached input"),
            ("cache_write_input_tokens", "Cache writes"),
            ("output_tokens", "Output tokens"), ("cost_micros", "Cost"))


@router.get("/billing")
async def billing(v: SignedInPage) -> Response:
    latest = await reconcile.recent(v.db, limit=SHOWN)
    by_account: dict[str, list[reconcile.Reconciliation]] = {}
    for rec in latest:  # newest first: each account's first is its last check
        by_account.setdefault(rec.account, []).append(rec)
    return v.render("billing.html", title="Billing",
                    by_account=sorted(by_account.items()),
                    tolerance=reconcile.TOLERANCE_PERCENT, figures=_FIGURES)
