"""The console's static assets (its one stylesheet, script and icon), cached by ETag."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request
from fastapi.responses import Response

from tenantry.api.console.view import STATIC, Console, console_of

router = APIRouter()


@router.get("/static/{name}")
async def asset(name: str, request: Request, c: Console = Depends(console_of)) -> Response:
    body = c.assets.get(name)
    if body is None:
        return Response(status_code=404)
    headers = {"ETag": f'"{c.etag}"', "Cache-Control": "private, max-age=300",
               "X-Content-Type-Options": "nosniff"}
    if request.headers.get("if-none-match") == f'"{c.etag}"':
        return Response(status_code=304, headers=headers)
    return Response(body, media_type=STATIC[name], headers=headers)
