"""Replay: recorded runs re-driven through the current code make the same decisions.

Set TENANTRY_RECORD_CORPUS=1 to (re)write tests/replay_corpus/ from these scenarios."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from tenantry.activities.tasks.store import ActivityStore
from tenantry.db import Database
from tenantry.ids import RunId, TenantId
from tenantry.runs import replay as replay_module
from tenantry.runs.decide import CallTool, Decision
from tenantry.runs.replay import RecordedRun, export_run, replay
from tenantry.store import RunStatus
from tests.support.activities import queued_task
from tests.support.api import Api
from tests.support.replay import CORPUS
from tests.support.scripts import answer, call, scripted
from tests.support.worker import Fakes

SCENARIOS = {
    "tools-then-answer": (scripted(call("effect", note="{input}"), call("add", a=1, b=2),
                                   answer("Done: {tool_results}"), text="order-1"), {}),
    "malformed-calls": (scripted({"tool_calls": [{"name": "", "arguments": {}}]},
                                 {"tool_calls": [{"name": "echo", "arguments": "{oops"}]},
                                 call("not_allowed", x=1), call("fail", message="no"),
                                 answer("coped")), {}),
    "two-calls-in-one-reply": (scripted({"tool_calls": [
        {"name": "echo", "arguments": {"text": "a"}},
        {"name": "echo", "arguments": {"text": "b"}}]}, answer("{tool_results}")), {}),
    "budget-stop": (scripted(*[call("echo", text="loop")] * 5), {"limits": {"max_steps": 2}}),
    "empty-reply": (scripted(answer("")), {}),
    "long-answer": (scripted(answer("x" * 20_000)), {}),
}


async def _record_scenarios(api: Api, db: Database, fakes: Fakes) -> list[RecordedRun]:
    tenant, h = await api.tenant()
    await api.tool_server(tenant, fakes.mcp.url)
    records = []
    for name, (script, spec) in SCENARIOS.items():
        agent = await api.agent(h, name=name, tools=["effect", "echo", "add", "fail"], **spec)
        run_id = await api.start(h, agent, script)
        await api.events_until_end(h, run_id)
        records.append(await export_run(db, TenantId(tenant), RunId.parse(run_id)))
    return records


async def test_fresh_runs_replay_without_differences(
    api: Api, db: Database, fakes: Fakes, worker: object
) -> None:
    records = await _record_scenarios(api, db, fakes)
    for record in records:
        assert replay(record) == [], record.run_id
    # The long answer went to the payload table and still replays exactly.
    assert any(len(str(e.data.get("answer", ""))) == 20_000 for r in records for e in r.events)
    if os.environ.get("TENANTRY_RECORD_CORPUS") == "1":
        CORPUS.mkdir(exist_ok=True)
        for name, record in zip(SCENARIOS, records, strict=True):
            (CORPUS / f"{name}.json").write_bytes(
                orjson.dumps(record.to_json(), option=orjson.OPT_INDENT_2) + b"\n")


def _corpus() -> list[RecordedRun]:
    files = sorted(CORPUS.glob("*.json"))
    assert len(files) >= len(SCENARIOS), "the replay corpus is missing; see this module's doc"
    return [RecordedRun.load(f) for f in files]


def test_the_corpus_replays_without_differences() -> None:
    for record in _corpus():
        assert replay(record) == [], record.run_id


def test_a_changed_tool_decision_is_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    real = replay_module.decide

    def drifted(*args: object) -> Decision | None:
        decision = real(*args)  # type: ignore[arg-type]
        if isinstance(decision, CallTool) and decision.arguments is not None:
            return dataclasses.replace(decision, arguments={**decision.arguments, "x": 1})
        return decision

    monkeypatch.setattr(replay_module, "decide", drifted)
    record = RecordedRun.load(CORPUS / "tools-then-answer.json")
    differences = replay(record)
    assert differences
    assert '"x":1' in differences[0].replayed and differences[0].seq == 3


def test_a_changed_prompt_is_reported() -> None:
    record = next(r for r in _corpus() if len(r.events) > 3)
    changed = dataclasses.replace(
        record, spec=dataclasses.replace(record.spec, system_prompt="A different prompt."))
    differences = replay(changed)
    assert differences and "different prompt" in differences[0].replayed


def test_replay_command_exits_nonzero_on_a_difference(tmp_path: Path) -> None:
    tenantry = str(Path(sys.executable).parent / "tenantry")
    ok = subprocess.run([tenantry, "replay", str(CORPUS)], capture_output=True, text=True,
                        check=False)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert f"{len(list(CORPUS.glob('*.json')))} run(s) replayed, 0 with differences" in ok.stdout
    data = orjson.loads((CORPUS / "tools-then-answer.json").read_bytes())
    finished = next(e for e in data["events"] if e["type"] == "RunFinished")
    finished["data"]["answer"] = "a different answer"
    tampered = tmp_path / "tampered.json"
    tampered.write_bytes(orjson.dumps(data))
    bad = subprocess.run([tenantry, "replay", str(tampered)], capture_output=True, text=True,
                         check=False)
    assert bad.returncode == 1
    assert "DIFF" in bad.stdout and "a different answer" in bad.stdout


async def test_a_tenants_ended_runs_leave_its_activity_tasks_out(db: Database) -> None:
    # A task is a run too, but no agent loop decided it: `replay --tenant` (and --export)
    # replaying an ended task reported a difference for it.
    tenant = TenantId.parse("tenant-tasks")
    task = await queued_task(db, tenant, "send")
    cancelled = await ActivityStore(db).cancel(tenant, task)
    assert cancelled.status is RunStatus.CANCELLED
    assert await replay_module.ended_runs(db, tenant) == []
