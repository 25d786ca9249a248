"""A refusal tells a tenant its own limits and counts and when to retry,
never how deep the cell's queue is. Tenant B probes while tenant A's queue grows: if any
figure in B's answers followed A's runs, two refusals at two depths would differ."""

from __future__ import annotations

import httpx2

from tests.support.api import Api, serving_api
from tests.support.scripts import answer, scripted

LEVELS = {"refuse_batch_runs_at": 5, "max_queued_runs": 40, "load_read_seconds": 0}


def _seen(r: httpx2.Response) -> tuple[int, bytes, list[tuple[str, str]]]:
    """Everything of an answer a tenant can read, less what varies per response anyway."""
    headers = sorted((k, v) for k, v in r.headers.items() if k not in ("date",))
    return r.status_code, r.content, headers


async def _fill(api: Api, h: dict[str, str], agent: str, runs: int) -> None:
    for i in range(runs):
        await api.start(h, agent, scripted(answer(f"a{i}")))


async def _refused(api: Api, h: dict[str, str], agent: str) -> httpx2.Response:
    r = await api.client.post("/v1/runs", headers=h, json={
        "agent_id": agent, "input": "hi", "priority": "batch"})
    assert r.status_code == 503, r.text
    return r


async def test_tenant_b_learns_nothing_of_tenant_as_queue(database_dsn: str) -> None:
    async with serving_api(database_dsn, **LEVELS) as api:
        _, a = await api.tenant("A")
        a_agent = await api.agent(a)
        _, b = await api.tenant("B")
        b_agent = await api.agent(b)
        await _fill(api, a, a_agent, 6)
        shallow = await _refused(api, b, b_agent)
        await _fill(api, a, a_agent, 20)
        deep = await _refused(api, b, b_agent)
    assert _seen(shallow) == _seen(deep)
    problem = shallow.json()
    assert set(problem) == {"type", "title", "status", "detail", "shed", "retry_after"}
    for figure in ("6", "26", "5", "40"):
        assert f" {figure} " not in f" {problem['detail']} "
