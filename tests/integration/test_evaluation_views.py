"""An evaluation as a tenant and an operator see it, on a real platform (the API on a
loopback port, a worker, the fake model server, the MCP test server): the client SDK's
typed `evaluations` namespace, `tenantry evaluations show/start` and `tenantry agents
promote`, and the console's side-by-side page linked from each of its runs' pages.

The setup is test_evaluations.py's: two versions of an agent, a test set of two cases,
and the candidate (version 2, whose prompt drops the policy) fails exactly one."""

from __future__ import annotations

import asyncio
import json

import pytest

from tenantry.api.console import epoch, session
from tenantry.client import (
    AsyncClient,
    Client,
    Evaluation,
    EvaluationCase,
    EvaluationSide,
    NotFound,
    TestSet,
    TestSetSummary,
    WaitTimeout,
)
from tests.support.api import OPERATOR_TOKEN, Api
from tests.support.cli import cli
from tests.support.evaluations import (
    CANDIDATE_PROMPT,
    POLICY_CASE,
    POLICY_PROMPT,
    STATUS_CASE,
    agent_with_two_versions,
)
from tests.support.scripts import answer, scripted
from tests.support.worker import Fakes

#: How each side's answer to the policy case starts (it quotes the version's prompt).
BASELINE_ANSWER = POLICY_PROMPT
CANDIDATE_ANSWER = CANDIDATE_PROMPT


async def _two_versions(api: Api, fakes: Fakes) -> tuple[str, str, str]:
    """A tenant with the MCP server, its API key, and an agent at versions 1 and 2."""
    tenant, h, agent = await agent_with_two_versions(api, fakes)
    return tenant, h["Authorization"].removeprefix("Bearer "), agent


async def _failed_evaluation(api: Api, key: str, agent: str) -> Evaluation:
    async with AsyncClient(api.base_url, key) as client:
        test_set = await client.evaluations.create_test_set(
            agent, "support", [POLICY_CASE, STATUS_CASE], stubs={"effect": "shipped (stub)"})
        started = await client.evaluations.start(agent, test_set.test_set_id,
                                                 candidate_version=2)
        return await client.evaluations.wait(agent, started.evaluation_id, timeout=120,
                                             poll_interval=0.2)


async def test_the_sdk_creates_starts_waits_and_reads_an_evaluation_typed(
    api: Api, fakes: Fakes, worker: object,
) -> None:
    _, key, agent = await _two_versions(api, fakes)
    async with AsyncClient(api.base_url, key) as client:
        test_set = await client.evaluations.create_test_set(
            agent, "support", [POLICY_CASE, STATUS_CASE], stubs={"effect": "shipped (stub)"})
        assert isinstance(test_set, TestSet)
        assert (test_set.name, test_set.tool_results, len(test_set.cases)) == (
            "support", "recorded", 2)
        assert test_set.cases[0].name == "mentions the policy"
        assert await client.evaluations.get_test_set(agent, test_set.test_set_id) == test_set
        started = await client.evaluations.start(agent, test_set.test_set_id,
                                                 candidate_version=2)
        assert (started.baseline.version, started.candidate.version) == (1, 2)
        # Too short a wait gives up with the evaluation as last read (its runs have just
        # been queued: none can have ended at the first read).
        with pytest.raises(WaitTimeout) as gave_up:
            await client.evaluations.wait(agent, started.evaluation_id, timeout=0)
        assert isinstance(gave_up.value.run, Evaluation)
        assert gave_up.value.run.status == "running" and gave_up.value.run.passed is None
        done = await client.evaluations.wait(agent, started.evaluation_id, timeout=120,
                                             poll_interval=0.2)
        listed = await client.evaluations.list(agent)
        sets = await client.evaluations.list_test_sets(agent)
    # A list of test sets is summaries: how many cases, not the cases.
    assert [(type(s), s.test_set_id, s.name, s.cases) for s in sets] == [
        (TestSetSummary, test_set.test_set_id, "support", 2)]
    assert done.status == "finished" and done.passed is False
    policy, status = done.cases
    assert isinstance(policy, EvaluationCase) and isinstance(policy.candidate, EvaluationSide)
    assert policy.regressed and not status.regressed
    assert policy.baseline.answer.startswith(BASELINE_ANSWER)
    assert policy.candidate.answer.startswith(CANDIDATE_ANSWER)
    assert "order-7 is shipped" in policy.candidate.answer
    assert [c.check for c in policy.candidate.failed_checks] == ["answer_contains"]
    assert "passed" in policy.differences and "answer" in policy.differences
    assert [c.outcome for c in policy.baseline.tool_calls] == ["recorded"]
    assert [c.outcome for c in status.candidate.tool_calls] == ["stub"]
    assert status.candidate.tool_calls_total == 1
    assert policy.candidate.tokens == (policy.candidate.input_tokens or 0) + (
        policy.candidate.output_tokens or 0)
    assert (done.baseline_totals.passed, done.candidate_totals.passed,
            done.candidate_totals.failed) == (2, 1, 1)
    assert [e.evaluation_id for e in listed] == [started.evaluation_id]
    assert listed.data[0].cases == 2
    # The blocking client reads the same report; an unknown id is NotFound.
    with Client(api.base_url, key) as sync:
        again = await asyncio.to_thread(sync.evaluations.get, agent, started.evaluation_id)
        assert again == done and again.raw["evaluation_id"] == started.evaluation_id
        with pytest.raises(NotFound):
            await asyncio.to_thread(sync.evaluations.get, agent, f"eval_{'0' * 32}")


async def test_the_cli_shows_the_failing_case_side_by_side_and_exits_1(
    api: Api, fakes: Fakes, worker: object,
) -> None:
    _, key, agent = await _two_versions(api, fakes)
    evaluation = await _failed_evaluation(api, key, agent)
    env = {"TENANTRY_URL": api.base_url, "TENANTRY_API_KEY": key, "COLUMNS": "260"}
    code, out, err = await cli("evaluations", "show", agent, evaluation.evaluation_id,
                               env=env)
    assert code == 1, err
    assert "failed: the candidate failed 1 of 2 case(s)" in out
    row = next(line for line in out.splitlines() if "mentions the policy" in line)
    # One row: the case, the baseline passing with its answer, the candidate failing with
    # its own, what differs and the check that failed.
    assert row.index("✓ " + BASELINE_ANSWER) < row.index("✗ " + CANDIDATE_ANSWER)
    assert "candidate: answer_contains" in row
    other = next(line for line in out.splitlines() if "reports the status" in line)
    assert other.count("✓") == 2 and "✗" not in other
    totals = next(line for line in out.splitlines() if "totals" in line)
    assert "2 passed, 0 failed" in totals and "1 passed, 1 failed" in totals

    code, out, err = await cli("evaluations", "show", agent, evaluation.evaluation_id,
                               "--json", env=env)
    assert code == 1, err
    assert json.loads(out) == (await api.client.get(
        f"/v1/agents/{agent}/evaluations/{evaluation.evaluation_id}",
        headers={"Authorization": f"Bearer {key}"})).json()

    # A bad id, a missing key: one line on stderr, no traceback, exit status 2.
    code, out, err = await cli("evaluations", "show", agent, "eval_nope", env=env)
    assert code == 2 and err.strip().count("\n") == 0 and "404" in err, err
    assert "Traceback" not in err
    code, _, err = await cli("evaluations", "show", agent, evaluation.evaluation_id,
                             env={"TENANTRY_URL": api.base_url})
    assert code == 2 and "API key" in err

    # Promotion on this evidence is refused (exit 1); without it, the tenant decides.
    code, _, err = await cli("agents", "promote", agent, "2", "--evaluation",
                             evaluation.evaluation_id, env=env)
    assert code == 1 and "failed 1 case" in err, err
    code, out, err = await cli("agents", "promote", agent, "2", env=env)
    assert code == 0 and out.strip() == f"{agent} v2 is live (was v1)", err


async def test_the_cli_starts_an_evaluation_and_waits_for_its_table(
    api: Api, fakes: Fakes, worker: object,
) -> None:
    _, key, agent = await _two_versions(api, fakes)
    env = {"TENANTRY_URL": api.base_url, "TENANTRY_API_KEY": key, "COLUMNS": "260"}
    with Client(api.base_url, key) as client:
        test_set = await asyncio.to_thread(
            client.evaluations.create_test_set, agent, "status only", [STATUS_CASE],
            stubs={"effect": "shipped (stub)"})
    code, out, err = await cli("evaluations", "start", agent, "--test-set",
                               test_set.test_set_id, "--candidate-version", "2", env=env)
    assert code == 0, err
    started = out.strip()
    assert started.startswith("eval_")
    code, out, err = await cli("evaluations", "start", agent, "--test-set",
                               test_set.test_set_id, "--candidate-version", "2", "--wait",
                               env=env)
    assert code == 0, err
    assert "passed: the candidate passed every case" in out and "reports the status" in out
    code, _, err = await cli("evaluations", "start", agent, "--test-set",
                             test_set.test_set_id, env=env)
    assert code == 2 and "--candidate-version" in err
    code, out, err = await cli("evaluations", "show", agent, started, "--wait", env=env)
    assert code == 0 and "status finished" in out, err


def _cookie() -> dict[str, str]:
    cookie, _ = session.issue(OPERATOR_TOKEN, epoch=epoch.FIRST)
    return {"Cookie": f"{session.SESSION_COOKIE}={cookie}"}


def _row(page: str, index: int) -> str:
    """The table row of case ``index`` on an evaluation's page."""
    start = page.index(f'<tr data-case="{index}"')
    return page[start:page.index("</tr>", start)]


async def test_the_console_shows_an_evaluation_side_by_side_linked_from_its_runs(
    api: Api, fakes: Fakes, worker: object,
) -> None:
    tenant, key, agent = await _two_versions(api, fakes)
    evaluation = await _failed_evaluation(api, key, agent)
    page_path = f"/console/evaluations/{tenant}/{evaluation.evaluation_id}"
    r = await api.client.get(page_path, headers=_cookie())
    assert r.status_code == 200, r.text
    page = r.text
    assert "failed: the candidate failed 1 of 2 case(s), 1 the baseline passed" in page
    policy = _row(page, 0)
    # The failing case, marked, with both answers, the failed check and what differs.
    assert 'class="regressed"' in policy and "mentions the policy" in policy
    baseline, candidate = policy.split('data-side="candidate"')
    assert "✓ passed" in baseline and BASELINE_ANSWER in baseline
    assert "✗ failed" in candidate and CANDIDATE_ANSWER in candidate
    assert "answer_contains" in candidate and "refund policy" in candidate
    assert 'class="diff diff-passed">passed<' in policy
    assert 'class="outcome o-recorded">recorded<' in policy
    status = _row(page, 1)
    assert "regressed" not in status and status.count("✓ passed") == 2
    assert 'class="outcome o-stub">stub<' in status
    assert "2 passed, 0 failed" in page and "1 passed, 1 failed" in page
    # Each side links its run's page, and that page links back.
    run_id = evaluation.cases[0].candidate.run_id
    assert f'href="/console/runs/{tenant}/{run_id}"' in policy
    run_page = await api.client.get(f"/console/runs/{tenant}/{run_id}", headers=_cookie())
    assert run_page.status_code == 200
    assert f'<a href="{page_path}">{evaluation.evaluation_id}</a>' in run_page.text
    # A run that is not an evaluation's has no such link.
    other = await api.start({"Authorization": f"Bearer {key}"}, agent,
                            scripted(answer("plain")))
    plain = await api.client.get(f"/console/runs/{tenant}/{other}", headers=_cookie())
    assert plain.status_code == 200 and 'id="run-evaluation"' not in plain.text

    # Unknown, malformed, another tenant's: the console's 404 page. Signed out: to login.
    other_tenant, _ = await api.tenant("Other")
    for wrong in (f"/console/evaluations/{tenant}/eval_{'0' * 32}",
                  f"/console/evaluations/{tenant}/nope",
                  f"/console/evaluations/{other_tenant}/{evaluation.evaluation_id}"):
        missing = await api.client.get(wrong, headers=_cookie())
        assert missing.status_code == 404 and "No evaluation with this id." in missing.text
    outside = await api.client.get(page_path)
    assert outside.status_code == 303 and "/console/login" in outside.headers["location"]
