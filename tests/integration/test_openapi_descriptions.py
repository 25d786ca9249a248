"""Every operation in /openapi.json says what it does: a summary written for a reader (not
FastAPI's title-cased function name, "Pending By Tenant") and a description."""

from __future__ import annotations

import re

from tests.support.api import Api


async def test_every_operation_has_a_written_summary_and_a_description(api: Api) -> None:
    doc = (await api.client.get("/openapi.json")).json()
    unsaid = []
    for path, operations in doc["paths"].items():
        for method, operation in operations.items():
            # FastAPI's default: the handler's name (the operationId's start), title-cased.
            name = re.sub(r"_" + re.escape(re.sub(r"\W", "_", path)) + f"_{method}$", "",
                          operation["operationId"])
            summary = operation.get("summary", "")
            if (not summary or summary == name.replace("_", " ").title()
                    or not operation.get("description", "").strip()):
                unsaid.append(f"{method.upper()} {path}: {summary!r}")
    assert not unsaid, "\n".join(unsaid)
    assert doc["paths"]["/v1/runs"]["post"]["summary"] == "Start a run of an agent"
    assert doc["paths"]["/admin/v1/approvals/pending"]["get"]["summary"] == (
        "The approvals inbox grouped by tenant")
