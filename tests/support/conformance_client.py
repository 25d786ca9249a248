"""The client command the MCP conformance suite runs (tests/support/mcp_conformance.py):
``python -m tests.support.conformance_client <server url>``.

It is the platform, driven as a tenant and its operator would: register the scenario's
server as a tool server of the tenant (the gateway negotiates with it and pins its tool
list), then for each tool it lists, publish an agent allowed that tool and run it; the
scripted model calls the tool once and answers with what it returned. A server that wants
OAuth is connected first, the authorization URL opened as a browser would (the scenario's
authorization server redirects at once), and again while it asks for a broader scope. Exit
status 0 when every run finished, whatever the tools answered: the suite judges what the server saw.

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
import orjson

from tests.support.scripts import answer, call, scripted

#: Arguments for the scenarios' tools that take any (the rest are called with none).
ARGUMENTS: dict[str, dict[str, Any]] = {"add_numbers": {"a": 2, "b": 3}}
#: Connect, run, connect again while the server asks for more: at most this often.
MAX_ROUNDS = 6
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
    # A client the scenario's authorization server issued beforehand (pre-registration).
    context = orjson.loads(os.environ.get("MCP_CONFORMANCE_CONTEXT") or "{}")
    body: dict[str, Any] = {"name": "conformance", "url": url,
                            "honours_idempotency_keys": False}
    servers = f"/admin/v1/tenants/{tenant}/tool-servers"
    with httpx2.Client(base_url=os.environ["CONFORMANCE_API"], timeout=60) as http:
        if context.get("client_id"):
            # A scenario for a machine-to-machine server: its operator would say so.
            grant = ("client_credentials" if "client-credentials" in scenario
                     else "authorization_code")
            body["oauth"] = {"client_id": context["client_id"], "grant": grant}
            if context.get("client_secret"):
                http.put(f"/admin/v1/tenants/{tenant}/secrets/conformance-client",
                         headers=operator, json={"value": context["client_secret"]}
                         ).raise_for_status()
                body["oauth"]["client_secret"] = "conformance-client"
        r = http.post(servers, headers=operator, json=body)
        print(f"register {scenario}: {r.status_code} {r.text}", flush=True)
        if r.status_code != 201:
            return 1
        server = r.json()
        waiting_runs: list[str] = []  # runs whose call waits for the server's connection
        for _ in range(MAX_ROUNDS):
            if _waiting(server):
                # As the person who authorizes it would: open the URL, let the authorization
                # server send the browser back to the platform's callback.
                r = http.post(f"{servers}/conformance/connect", headers=operator)
                print(f"connect: {r.status_code} {r.text}", flush=True)
                if r.status_code != 200:
                    return 0  # the platform stopped asking (e.g. a scope never granted)
                if (location := r.json()["authorization_url"]) is not None:
                    back = http.get(location, follow_redirects=False)
                    r = http.get(back.headers["location"])
                    print(f"callback: {r.status_code} {r.text}", flush=True)
                server = http.get(f"{servers}/conformance", headers=operator).json()
                if _waiting(server):
                    continue
            # Connected: the runs that waited for it go on by themselves.
            runs = [_ended(http, tenant_key, run_id) for run_id in waiting_runs]
            runs += [_run(http, tenant_key, tool) for tool in server["tools"]]
            waiting_runs = []
            for run in runs:
                print(f"run {run['run_id']}: {run['status']}: {run.get('answer')!r}", flush=True)
                if _waits_for_connection(run):
                    waiting_runs.append(run["run_id"])
                elif run["status"] != "finished":
                    return 1
            server = http.get(f"{servers}/conformance", headers=operator).json()
            if not _waiting(server) and not waiting_runs:
                return 0
    return 1


def _waiting(server: dict[str, Any]) -> bool:
    oauth = server.get("oauth")
    return oauth is not None and oauth["status"] == "authorization_required"


def _waits_for_connection(run: dict[str, Any]) -> bool:
    return run["status"] == "waiting" and run.get("waiting_reason") == "authorization_required"


def _run(http: httpx2.Client, tenant_key: dict[str, str], tool: str) -> dict[str, Any]:
    r = http.post("/v1/agents", headers=tenant_key, json={
        "name": f"calls-{tool}"[:60], "model": "scripted", "system_prompt": "",
        "tools": [tool]})
    r.raise_for_status()
    script = scripted(call(tool, **ARGUMENTS.get(tool, {})), answer("{last_tool_result}"))
    r = http.post("/v1/runs", headers=tenant_key,
                  json={"agent_id": r.json()["agent_id"], "input": script})
    r.raise_for_status()
    return _ended(http, tenant_key, r.json()["run_id"])


def _ended(http: httpx2.Client, headers: dict[str, str], run_id: str) -> dict[str, Any]:
    deadline = time.monotonic() + 45
    while True:
        run: dict[str, Any] = http.get(f"/v1/runs/{run_id}", headers=headers).json()
        if (run["status"] in _ENDED or _waits_for_connection(run)
                or time.monotonic() > deadline):
            return run
        time.sleep(0.05)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
