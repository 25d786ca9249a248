"""An approver sees what they approve: beside the exact call, the run's agent, its input and
what the model said before asking; once decided, who decided, when, and their comment — in
the tenant's API and the operator's inbox, each tenant seeing only its own."""

from __future__ import annotations

from typing import Any

from tenantry.runs.approval_context import MODEL_SAID_CHARS
from tests.support.api import Api
from tests.support.console import AGENT, ASKED, REFUND, SAID, operator, waiting_run
from tests.support.scripts import answer, call, saying, scripted
from tests.support.waiting import until
from tests.support.worker import Fakes


async def _pending(api: Api, h: dict[str, str], count: int) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []

    async def filed() -> bool:
        r = await api.client.get("/v1/approvals", params={"status": "pending"}, headers=h)
        found[:] = r.json()["data"]
        return len(found) == count

    await until(filed, f"{count} pending approvals", 30)
    return found


async def test_the_approval_says_agent_input_model_text_and_who_decided(
    api: Api, fakes: Fakes, worker: object,
) -> None:
    tenant, h, run_id, approval_id = await waiting_run(api, fakes)
    agent = (await api.run(h, run_id))["agent_id"]
    (pending,) = await _pending(api, h, 1)
    asked = {"agent": {"id": agent, "name": AGENT},
             "run_input": scripted(saying(SAID, call("effect", note=REFUND)),
                                   answer("{last_tool_result}"), text=ASKED),
             "model_said": SAID, "model_said_truncated": False}
    assert {k: pending[k] for k in asked} == asked
    assert (pending["decided_by"], pending["decided_at"], pending["comment"]) == (None,) * 3

    # The operator's inbox, grouped and by tenant, shows the same beside the call.
    grouped = await api.client.get("/admin/v1/approvals/pending", headers=api.operator)
    (group,) = [g for g in grouped.json()["tenants"] if g["tenant_id"] == tenant]
    (first,) = group["first"]
    assert {k: first[k] for k in asked} == asked
    of_tenant = await api.client.get(f"/admin/v1/tenants/{tenant}/approvals/pending",
                                     headers=api.operator)
    assert [{k: a[k] for k in asked} for a in of_tenant.json()["data"]] == [asked]

    # Another tenant sees nothing of it.
    _, other = await api.tenant("Other")
    assert (await api.client.get(f"/v1/approvals/{approval_id}", headers=other)
            ).status_code == 404
    assert (await api.client.get("/v1/approvals", headers=other)).json()["data"] == []

    r = await api.client.post(f"/v1/approvals/{approval_id}", headers=h,
                              json={"decision": "approve", "comment": "refund agreed"})
    assert r.status_code == 200, r.text
    decided = r.json()
    # Who: the deciding API key, named as the audit trail names it.
    trail = await api.client.get("/v1/audit", params={"kind": "change"}, headers=h)
    (change,) = [e for e in trail.json()["data"]
                 if e["target"] == f"/v1/approvals/{approval_id}"]
    assert decided["decided_by"] == change["actor"] and change["actor"].startswith("key:")
    assert decided["comment"] == "refund agreed" and decided["decided_at"] is not None
    shown = (await api.client.get(f"/v1/approvals/{approval_id}", headers=h)).json()
    assert shown == decided
    assert {k: shown[k] for k in asked} == asked  # still there once decided
    listed = (await api.client.get("/v1/approvals", params={"status": "approved"},
                                   headers=h)).json()["data"]
    assert listed == [decided]


async def test_the_operators_decision_is_named_and_a_long_text_is_cut(
    api: Api, fakes: Fakes, worker: object,
) -> None:
    tenant, h = await api.tenant()
    await api.tool_server(tenant, fakes.mcp.url)
    agent = await api.agent(h, tools=["effect"], needs_approval=["effect"])
    long = "why " * MODEL_SAID_CHARS
    await api.start(h, agent, scripted(saying(long, call("effect", note="x")), answer("ok")))
    (pending,) = await _pending(api, h, 1)
    assert pending["model_said"] == long[:MODEL_SAID_CHARS]
    assert pending["model_said_truncated"] is True

    session = operator()
    r = await api.client.post(
        f"/console/approvals/{tenant}/{pending['approval_id']}", headers=session.headers,
        data=session.form(decision="deny", comment="not today"))
    assert r.status_code == 303, r.text
    shown = (await api.client.get(f"/v1/approvals/{pending['approval_id']}",
                                  headers=h)).json()
    assert (shown["status"], shown["decided_by"], shown["comment"]) == (
        "denied", "operator", "not today")
