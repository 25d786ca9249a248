"""What the evaluation tests share (test_evaluations.py, test_evaluation_views.py): an agent
with two versions whose second drops a policy from its prompt, the two cases of a test set
where exactly the policy case fails on that candidate, and waiting for a report."""

from __future__ import annotations

import asyncio
from typing import Any

from tests.support.api import Api
from tests.support.scripts import answer, call, scripted
from tests.support.worker import Fakes

POLICY_PROMPT = "Always mention the refund policy."
CANDIDATE_PROMPT = "Be brief."

#: A case whose answer quotes the system prompt: a prompt without the policy fails it.
POLICY_CASE: dict[str, Any] = {
    "name": "mentions the policy",
    "input": scripted(call("effect", note="order-7"),
                      answer("{system} Order: {last_tool_result}")),
    "checks": {"answer_contains": ["refund policy"], "tools_called": ["effect"]},
    "recorded": [{"tool": "effect", "arguments": {"note": "order-7"},
                  "result": "order-7 is shipped"}],
}
#: A case both versions pass (its call answered by a stub, or live).
STATUS_CASE: dict[str, Any] = {
    "name": "reports the status",
    "input": scripted(call("effect", note="order-8"), answer("Status: {last_tool_result}")),
    "checks": {"answer_contains": ["shipped"],
               "tool_called_with": [{"tool": "effect", "arguments": {"note": "order-8"}}],
               "max_steps": 3},
}


async def agent_with_two_versions(api: Api, fakes: Fakes
                                  ) -> tuple[str, dict[str, str], str]:
    """A tenant with the MCP test server, its API key's headers, and an agent at version 1
    (the policy prompt, live) and version 2 (published, not live)."""
    tenant, h = await api.tenant()
    await api.tool_server(tenant, fakes.mcp.url)
    agent = await api.agent(h, tools=["effect"], system_prompt=POLICY_PROMPT)
    r = await api.client.post(f"/v1/agents/{agent}/versions", headers=h, json={
        "model": "scripted", "system_prompt": CANDIDATE_PROMPT, "tools": ["effect"]})
    assert r.status_code == 201, r.text
    return tenant, h, agent


async def evaluation_done(api: Api, h: dict[str, str], agent: str, evaluation: str,
                          within: float = 120) -> dict[str, Any]:
    """The evaluation's report once every run of it ended."""
    async with asyncio.timeout(within):
        while True:
            r = await api.client.get(f"/v1/agents/{agent}/evaluations/{evaluation}", headers=h)
            assert r.status_code == 200, r.text
            body: dict[str, Any] = r.json()
            if body["status"] == "finished":
                return body
            await asyncio.sleep(0.2)
