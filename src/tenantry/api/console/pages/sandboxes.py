"""The sandboxes page: each in-process worker's backend and warm pool."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import Response

from tenantry.api.console import workers
from tenantry.api.console.view import SignedInPage

router = APIRouter()


@router.get("/sandboxes")
async def sandboxes(v: SignedInPage) -> Response:
    return v.render("sandboxes.html", title="Sandboxes",
                    views=workers.sandboxes(v.platform.local))
