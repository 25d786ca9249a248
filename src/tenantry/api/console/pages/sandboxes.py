"""The sandboxes page: each in-process worker's backend and warm pool."""

from __future__ import annotations

from fastapi import APIRouter, Depends
from fastapi.responses import Response

from tenantry.api.console import workers
from tenantry.api.console.view import View, view

router = APIRouter()


@router.get("/sandboxes")
async def sandboxes(v: View = Depends(view)) -> Response:
    sess = v.session
    if sess is None:
        return v.to_login()
    return v.render("sandboxes.html", sess, title="Sandboxes",
                    views=workers.sandboxes(v.platform.local))
