"""The operator API's form of a tenant API route: ``/v1/tool-servers/x`` of tenant T is
``/admin/v1/tenants/T/tool-servers/x`` with the operator token, taking and answering the
same bodies. ``OperatorTransport`` sends the client SDK's requests there, so a tenant's
command run with ``--tenant T`` acts on T as the operator (``tenantry.cli.operator``)."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import httpx2

#: The tenant API's routes the operator API has a form of, under
#: ``/admin/v1/tenants/{tenant_id}``, with the same bodies; and what the operator's path
#: adds at its end (a decision is ``…/approvals/{id}/decision``: ``…/approvals/pending``,
#: the operator's inbox of one tenant, is a sibling of ``…/approvals/{id}``).
OPERATOR_FORMS = tuple((re.compile(form), suffix) for form, suffix in (
    (r"(GET|POST) /v1/tool-servers", ""),
    (r"(GET|DELETE) /v1/tool-servers/[^/]+", ""),
    (r"POST /v1/tool-servers/[^/]+/(pin|connect)", ""),
    (r"GET /v1/secrets", ""),
    (r"(GET|PUT) /v1/secrets/[^/]+", ""),
    (r"GET /v1/model-accounts(/[^/]+)?", ""),
    (r"(GET|POST) /v1/api-keys", ""),
    (r"(GET|DELETE) /v1/api-keys/[^/]+", ""),
    (r"GET /v1/runs/[^/]+(/trace|/events)?", ""),
    (r"GET /v1/approvals(/[^/]+)?", ""),
    (r"POST /v1/approvals/[^/]+", "/decision"),
))


def operator_path(method: str, path: str, tenant: str) -> str | None:
    """The operator API's path of the tenant API's ``method path`` for ``tenant``; None
    when the operator API has no form of it."""
    from urllib.parse import quote

    for form, suffix in OPERATOR_FORMS:
        if form.fullmatch(f"{method} {path}"):
            return f"/admin/v1/tenants/{quote(tenant, safe='')}{path.removeprefix('/v1')}{suffix}"
    return None


def operator_transport(tenant: str) -> httpx2.BaseTransport:
    """An HTTP transport sending the tenant API's requests to their operator forms for
    ``tenant`` (module doc); a request without one is answered 405 here, never sent."""
    import httpx2

    class OperatorTransport(httpx2.HTTPTransport):
        def handle_request(self, request: httpx2.Request) -> httpx2.Response:
            path, mark, query = request.url.raw_path.partition(b"?")
            moved = operator_path(request.method, path.decode(), tenant)
            if moved is None:
                return httpx2.Response(405, request=request, json={
                    "title": "Method Not Allowed", "status": 405,
                    "detail": f"the operator API has no form of {request.method} "
                              f"{path.decode()}: use the tenant's API key"})
            request.url = request.url.copy_with(raw_path=moved.encode() + mark + query)
            return super().handle_request(request)

    return OperatorTransport()
