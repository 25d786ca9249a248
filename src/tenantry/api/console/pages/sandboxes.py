"""The sandboxes page: each in-process worker's backend and warm pool."""

from __future__ import annotations

from fastapi import APIRouter, Depends
from fastapi.responses import Response

from tenantry.api.console import workers
from tenantry.api.console.view import SignedIn, signed_in

router = APIRouter()


@router.get("/sandboxes")
async def sandboxes(v: SignedIn = Depends(signed_in)) -> Response:
    return v.render("sandboxes.html", title="Sandboxes",
                    views=workers.sandboxes(v.platform.local))
