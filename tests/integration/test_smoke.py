from __future__ import annotations

from tests.conftest import Api


async def test_tenant_agent_run_roundtrip(api: Api) -> None:
    _tenant, headers = await api.tenant()
    agent = await api.agent(headers)
    r = await api.client.post("/v1/runs", json={"agent_id": agent, "input": "hi"},
                              headers=headers)
    assert r.status_code == 202, r.text
    run_id = r.json()["run_id"]
    r = await api.client.get(f"/v1/runs/{run_id}", headers=headers)
    assert r.json()["status"] == "queued"
