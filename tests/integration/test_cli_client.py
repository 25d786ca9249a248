"""The CLI conveniences against a real API: `tenantry runs tail` follows a run live to its
end, `tenantry runs list` and `tenantry usage` show tables of what the API holds."""

from __future__ import annotations

from tests.support.api import Api
from tests.support.cli import cli
from tests.support.scripts import answer, call, scripted
from tests.support.waiting import until
from tests.support.worker import Fakes


async def test_tail_follows_a_run_live_and_list_and_usage_show_it(
    api: Api, fakes: Fakes, worker: object,
) -> None:
    tenant, h = await api.tenant()
    await api.tool_server(tenant, fakes.mcp.url)
    agent = await api.agent(h, tools=["echo"])
    key = h["Authorization"].removeprefix("Bearer ")
    env = {"TENANTRY_URL": api.base_url, "TENANTRY_API_KEY": key}
    run_id = await api.start(h, agent, scripted(
        {**call("echo", text="tail me"), "delay_ms": 300}, answer("done: {last_tool_result}")))
    code, out, err = await cli("runs", "tail", run_id, env=env)
    assert code == 0, err
    lines = out.splitlines()
    assert "RunCreated" in lines[0] and "RunFinished" in lines[-1]
    assert any("ToolCompleted" in line and "echo [effects] ok" in line for line in lines)
    code, out, _ = await cli("runs", "list", env=env)
    assert code == 0 and run_id in out and "finished" in out
    code, out, _ = await cli("usage", "--group-by", "agent", env=env)
    assert code == 0 and agent in out
    code, out, _ = await cli("usage", env={"TENANTRY_URL": api.base_url,
                                           "TENANTRY_OPERATOR_TOKEN": api.operator[
                                               "Authorization"].removeprefix("Bearer ")})
    assert code == 0 and tenant in out
    # A wrong key is a clear error, not a traceback.
    code, _, err = await cli("runs", "list", env={**env, "TENANTRY_API_KEY": "nope"})
    assert code == 2 and "401" in err


async def test_list_into_a_pipe_keeps_whole_ids(api: Api, fakes: Fakes, worker: object) -> None:
    _, h = await api.tenant()
    agent = await api.agent(h)
    key = h["Authorization"].removeprefix("Bearer ")
    run_id = await api.start(h, agent, scripted(answer("done")))
    await api.events_until_end(h, run_id)
    # A narrow COLUMNS is what a pipe gets (rich squeezes tables to it): lines, not a table.
    code, out, err = await cli("runs", "list", env={
        "TENANTRY_URL": api.base_url, "TENANTRY_API_KEY": key, "COLUMNS": "40"})
    assert code == 0, err
    header, *rows = [line.split("\t") for line in out.splitlines()]
    assert header[:4] == ["run", "agent", "v", "status"]
    assert [row[:4] + row[-1:] for row in rows] == [[run_id, "helper", "1", "finished", agent]]


async def test_tail_shows_why_a_denied_call_was_not_made(
    api: Api, fakes: Fakes, worker: object,
) -> None:
    tenant, h = await api.tenant()
    await api.tool_server(tenant, fakes.mcp.url)
    agent = await api.agent(h, tools=["effect"], needs_approval=["effect"])
    run_id = await api.start(h, agent, scripted(call("effect", note="refund"), answer("no")))

    async def pending() -> bool:
        page = (await api.client.get("/v1/approvals", params={"status": "pending"},
                                     headers=h)).json()
        return bool(page["data"])

    await until(pending, "the run asks for approval", 30)
    approval = (await api.client.get("/v1/approvals", headers=h)).json()["data"][0]
    await api.client.post(f"/v1/approvals/{approval['approval_id']}", headers=h,
                          json={"decision": "deny", "comment": "amount too high"})
    env = {"TENANTRY_URL": api.base_url, "TENANTRY_API_KEY": h["Authorization"][7:]}
    code, out, err = await cli("runs", "tail", run_id, env=env)
    assert code == 0, err
    line = next(line for line in out.splitlines() if "ToolCompleted" in line)
    assert line.endswith("effect refused: the approver denied this call: amount too high")
