"""The official MCP conformance suite's client scenarios, with the platform as the client:
each scenario's server is registered as a tenant's tool server and an agent calls its tool
through the real gateway and worker (tests/support/conformance_client.py).

Every client scenario of the 2025-06-18 and 2025-11-25 specs is here. A scenario the
platform decides against is in ``DECIDED_AGAINST`` with its ADR; it must still fail the
way the ADR says (its checks), so the decision is tested too."""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
from pathlib import Path

import pytest

from tenantry.testing import FakeModelServer
from tests.support.api import serving_api
from tests.support.mcp_conformance import (
    CLIENT_SCENARIOS,
    EXTENSION_SCENARIOS,
    SPECS,
    listed_client_scenarios,
    needs_node,
    run_client_scenario,
)
from tests.support.worker import running_worker

pytestmark = needs_node

ROOT = Path(__file__).resolve().parents[2]

#: Scenarios the platform decides against, and the ADR that says why.
DECIDED_AGAINST = {
    # An unattended run has no person to fill a form: the client declares no elicitation
    # capability and refuses the server's request at once (docs/decisions/0039-…).
    "elicitation-sep1034-client-defaults": "0039",
}


async def test_every_client_scenario_of_the_pinned_suite_is_here() -> None:
    listed = await listed_client_scenarios()
    ours = {name for name, specs in listed.items() if set(specs) & set(SPECS)}
    assert ours == set(CLIENT_SCENARIOS)


@pytest.mark.parametrize("scenario", [*CLIENT_SCENARIOS, *EXTENSION_SCENARIOS])
async def test_client_scenario(scenario: str, database_dsn: str, tmp_path: Path) -> None:
    done = tmp_path / "done"
    async with FakeModelServer() as model:
        platform = contextlib.AsyncExitStack()
        api = await platform.enter_async_context(serving_api(database_dsn))
        await platform.enter_async_context(running_worker(database_dsn, model.base_url))
        async with platform:
            tenant, headers = await api.tenant(f"conformance {scenario}")
            env = {**os.environ, "CONFORMANCE_API": api.base_url, "CONFORMANCE_DONE": str(done),
                   "CONFORMANCE_OPERATOR_TOKEN": api.operator["Authorization"].split()[1],
                   "CONFORMANCE_TENANT": tenant,
                   "CONFORMANCE_API_KEY": headers["Authorization"].split()[1]}
            suite = asyncio.create_task(run_client_scenario(
                scenario, [sys.executable, "-m", "tests.support.conformance_client"],
                out=tmp_path / "results", cwd=ROOT, env=env))
            # The adapter is another process: the file it writes at its end is the signal.
            while not done.exists() and not suite.done():  # noqa: ASYNC110
                await asyncio.sleep(0.05)
        # The platform has stopped (its sessions closed): the scenario's server can stop.
        checks, report = await suite
    failed = {c["id"]: c.get("errorMessage") for c in checks if c["status"] == "FAILURE"}
    passed = {c["id"] for c in checks if c["status"] == "SUCCESS"}
    if scenario in DECIDED_AGAINST:
        # Refused at once with a JSON-RPC error (the server's request is not left to time
        # out): the tool reports the refusal and the run finishes.
        assert "does not serve elicitation/create" in str(failed), report
        return
    assert not failed, report
    required = CLIENT_SCENARIOS.get(scenario) or EXTENSION_SCENARIOS[scenario]
    assert set(required) <= passed, report
