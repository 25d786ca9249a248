"""OpenAPI links (a route's ``responses={status: links(...)}``): which values of one
answer are the inputs of other operations — the agent just created is the one to read,
version and run; the run just started is the one to read, stream, cancel and delete.
Generated clients and Schemathesis's stateful phase follow them."""

from __future__ import annotations

from typing import Any


def to(method: str, path: str, description: str, *, parameters: dict[str, str] | None = None,
       body: object = None) -> dict[str, Any]:
    """A link to the operation ``method path`` (an ``operationRef``: FastAPI's operation
    ids are derived from function names and may change); ``parameters`` and ``body`` are
    runtime expressions (``$response.body#/run_id``, ``$request.path.agent_id``)."""
    pointer = path.replace("~", "~0").replace("/", "~1")
    link: dict[str, Any] = {"operationRef": f"#/paths/{pointer}/{method.lower()}",
                            "description": description}
    if parameters:
        link["parameters"] = parameters
    if body is not None:
        link["requestBody"] = body
    return link


def links(**named: dict[str, Any]) -> dict[str, Any]:
    """A response's ``links``, by name."""
    return {"links": named}
