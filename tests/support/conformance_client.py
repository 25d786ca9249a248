"""The client command the MCP conformance suite runs (tests/support/mcp_conformance.py):
``python -m tests.support.conformance_client <server url>``.

It is the platform, driven as a tenant and its operator would: register the scenario's
server as a tool server of the tenant (the gateway negotiates with it and pins its tool
list), then for each tool it lists, publish an agent allowed that tool and run it; the
scripted model calls the tool once and answers with what it returned. Exit status 0 when
every run finished, whatever the tools answered: the suite judges what the server saw.

Where to reach the platform comes from the environment the test sets: ``CONFORMANCE_API``
(its URL), ``CONFORMANCE_OPERATOR_TOKEN``, ``CONFORMANCE_TENANT`` and ``CONFORMANCE_API_KEY``
(that tenant's key). At its end it writes the file ``CONFORMANCE_DONE`` names: the test then
stops the platform, whose pooled sessions would keep the scenario's server from stopping (a
session's notification stream stays open while the session lives)."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

import httpx2

from tests.support.scripts import answer, call, scripted

#: Arguments for the scenarios' tools that take any (the rest are called with none).
ARGUMENTS: dict[str, dict[str, Any]] = {"add_numbers": {"a": 2, "b": 3}}
_ENDED = ("finished", "failed", "cancelled")


def main(argv: list[str]) -> int:
    try:
        return _drive(argv[-1])
    finally:
        Path(os.environ["CONFORMANCE_DONE"]).touch()


def _drive(url: str) -> int:
    scenario = os.environ.get("MCP_CONFORMANCE_SCENARIO", "scenario")
    tenant = os.environ["CONFORMANCE_TENANT"]
    operator = {"Authorization": f"Bearer {os.environ['CONFORMANCE_OPERATOR_TOKEN']}"}
    tenant_key = {"Authorization": f"Bearer {os.environ['CONFORMANCE_API_KEY']}"}
    with httpx2.Client(base_url=os.environ["CONFORMANCE_API"], timeout=60) as http:
        r = http.post(f"/admin/v1/tenants/{tenant}/tool-servers", headers=operator,
                      json={"name": "conformance", "url": url,
                            "honours_idempotency_keys": False})
        print(f"register {scenario}: {r.status_code} {r.text}", flush=True)
        if r.status_code != 201:
            return 1
        for tool in r.json()["tools"]:
            r = http.post("/v1/agents", headers=tenant_key, json={
                "name": f"calls-{tool}"[:60], "model": "scripted", "system_prompt": "",
                "tools": [tool]})
            r.raise_for_status()
            script = scripted(call(tool, **ARGUMENTS.get(tool, {})), answer("{last_tool_result}"))
            r = http.post("/v1/runs", headers=tenant_key,
                          json={"agent_id": r.json()["agent_id"], "input": script})
            r.raise_for_status()
            run = _ended(http, tenant_key, r.json()["run_id"])
            print(f"run calling {tool}: {run['status']}: {run.get('answer')!r}", flush=True)
            if run["status"] != "finished":
                return 1
    return 0


def _ended(http: httpx2.Client, headers: dict[str, str], run_id: str) -> dict[str, Any]:
    deadline = time.monotonic() + 45
    while True:
        run: dict[str, Any] = http.get(f"/v1/runs/{run_id}", headers=headers).json()
        if run["status"] in _ENDED or time.monotonic() > deadline:
            return run
        time.sleep(0.05)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
