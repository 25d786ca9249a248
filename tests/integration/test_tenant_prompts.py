"""No prompt ever holds two tenants' data (invariant 4): two tenants' runs, interleaved on
one worker and one provider account, with tool calls, summaries (ADR 0031) and streamed
replies (ADR 0030). Each tenant's system prompt and inputs carry a marker of its own; every
request the provider received carries exactly one tenant's, and each tenant's requests are
exactly the model calls its runs made."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from tenantry.models.summaries import SUMMARY_REQUEST, summarized_steps
from tests.support.api import Api
from tests.support.scripts import answer, call, scripted
from tests.support.worker import Fakes, running_worker

RUNS_PER_TENANT = 6
ECHOES = 6  # tool calls per run: enough for summaries at AFTER_TOKENS


async def test_no_prompt_holds_two_tenants_data(
    api: Api, fakes: Fakes, database_dsn: str
) -> None:
    tenants: dict[str, tuple[dict[str, str], str]] = {}
    for name in ("alpha", "bravo"):
        marker = f"{name}{uuid.uuid4().hex}"
        tenant, h = await api.tenant(name)
        await api.tool_server(tenant, fakes.mcp.url)
        agent = await api.agent(h, system_prompt=f"You work for {marker}.",
                                tools=["echo", "slow"], limits={"max_steps": ECHOES + 5},
                                summarize={"after_tokens": 400, "keep_last_steps": 1})
        tenants[marker] = (h, agent)

    def script(marker: str, i: int) -> dict[str, object]:
        # A short call first: the run's event stream is open and announced by its end, so
        # the later model calls stream (ADR 0030). The echoes put the input, marker first,
        # into tool results, and from there into the summaries' quotes.
        return scripted(call("slow", seconds=0.2),
                        *(call("echo", text="{input} step " + str(k)) for k in range(ECHOES)),
                        answer("{last_tool_result}"), text=f"{marker} run {i}")

    logs: dict[str, list[asyncio.Task[list[dict[str, object]]]]] = {m: [] for m in tenants}
    async with running_worker(database_dsn, fakes.model.base_url):
        for i in range(RUNS_PER_TENANT):  # interleaved: alpha, bravo, alpha, bravo, ...
            for marker, (h, agent) in tenants.items():
                run_id = await api.start(h, agent, script(marker, i))
                logs[marker].append(asyncio.create_task(
                    api.events_until_end(h, run_id, within=120)))
        ended = {m: await asyncio.gather(*tasks) for m, tasks in logs.items()}

    calls_made: dict[str, int] = {}
    for marker, runs in ended.items():
        assert all(events[-1]["type"] == "RunFinished" for events in runs), marker
        calls_made[marker] = sum(1 for events in runs for e in events
                                 if e["type"] in ("ModelReplied", "Summarized"))

    attributed: dict[str, list[dict[str, Any]]] = {m: [] for m in tenants}
    for request in fakes.model.requests:
        if not request.body:
            continue  # nothing of anyone's (a models list, a probe)
        text = request.body.decode()
        present = [m for m in tenants if m in text]
        assert len(present) == 1, (f"a request to the provider holds the data of "
                                   f"{len(present)} tenants: {present}")
        attributed[present[0]].append(request.json())

    for marker, bodies in attributed.items():
        # Every model call of the tenant's runs, and nothing else, carried its marker.
        assert len(bodies) == calls_made[marker], marker
        # ... and they covered what the promise is about: tool results, summaries (asked
        # for, and quoted in later prompts), streamed and whole replies.
        assert any(m["role"] == "tool" and marker in m["content"]
                   for b in bodies for m in b["messages"]), marker
        asking = [b for b in bodies if b["messages"][-1].get("content") == SUMMARY_REQUEST]
        assert asking, f"no summary was made for {marker}"
        assert any(summarized_steps(m) and marker in m["content"]
                   for b in bodies for m in b["messages"]), marker
        streamed = [b for b in bodies if b.get("stream")]
        assert streamed and len(streamed) < len(bodies), marker
