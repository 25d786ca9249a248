"""Billing that can be checked: runs through fake OpenAI and Anthropic providers (real HTTP),
then the platform's usage facts per account and UTC day against the reports those providers
serve from their own usage logs — in the API, the CLI (exit status) and the console."""

from __future__ import annotations

import dataclasses
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx2

from tenantry.api.console import epoch, session
from tenantry.testing.fake_model import FakeModelServer, UsageRecord
from tests.support.api import OPERATOR_TOKEN, Api, free_port
from tests.support.billing import ADMIN_KEY, run_traffic
from tests.support.cli import cli
from tests.support.worker import Fakes


def _today() -> date:
    return datetime.now(UTC).date()


async def _reconcile(api: Api, account: str, first: date, last: date,
                     **source: Any) -> dict[str, Any]:
    r = await api.client.post("/admin/v1/billing/reconcile", headers=api.operator, json={
        "account": account, "from": first.isoformat(), "to": last.isoformat(), **source})
    assert r.status_code == 201, r.text
    assert ADMIN_KEY not in r.text
    body: dict[str, Any] = r.json()
    return body


def _figures(day: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {f["name"]: f for f in day["figures"]}


async def test_reconcile_flags_exactly_the_day_and_account_the_provider_disagrees_on(
    api: Api, fakes: Fakes, providers: tuple[FakeModelServer, FakeModelServer],
    database_dsn: str, tmp_path: Path,
) -> None:
    openai, anthropic = providers
    await api.model_account("bill-oa", openai.base_url, region="us")
    await api.model_account("bill-an", anthropic.base_url, provider="anthropic", region="eu")
    await run_traffic(api, fakes, database_dsn)
    assert len(openai.usage_log) == len(anthropic.usage_log) == 6
    today = _today()
    # Ten days: more than the providers' default 7 buckets a page, so fetching paginates.
    first = today - timedelta(days=9)

    # They agree: each account's one day matches the provider's report exactly.
    for account, server in (("bill-oa", openai), ("bill-an", anthropic)):
        result = await _reconcile(api, account, first, today,
                                  fetch={"admin_key": ADMIN_KEY})
        assert result["flagged_days"] == 0, result
        assert result["cost_compared"] is True
        [day] = result["days"]
        assert (day["day"], day["status"], day["flagged"]) == (today.isoformat(), "match",
                                                               False)
        figures = _figures(day)
        log = server.usage_log
        assert figures["input_tokens"]["theirs"] == sum(r.prompt_tokens for r in log)
        assert figures["output_tokens"]["theirs"] == sum(r.completion_tokens for r in log)
        assert figures["cached_input_tokens"]["theirs"] == sum(r.cached_tokens for r in log)
        assert all(f["ours"] == f["theirs"] for f in figures.values()), figures
        assert figures["cost_micros"]["ours"] > 0
        # OpenAI counts requests; Anthropic's report has none and reports cache writes.
        assert ("requests" in figures) == (server is openai)
        assert ("cache_write_input_tokens" in figures) == (server is anthropic)
        reports = [q for q in server.requests if "organization" in q.path]
        assert len([q for q in reports if "usage" in q.path]) == 2  # two pages of buckets
        assert all(ADMIN_KEY in (q.api_key or "") for q in reports)

    # The export an operator downloads gives the same answer, through the CLI: exit 0.
    async with httpx2.AsyncClient() as client:
        page = await client.get(f"{openai.base_url}/organization/usage/completions", params={
            "start_time": int(datetime(today.year, today.month, today.day,
                                       tzinfo=UTC).timestamp()), "bucket_width": "1d"},
            headers={"Authorization": f"Bearer {ADMIN_KEY}"})
    assert page.status_code == 200
    export = tmp_path / "openai-usage.json"
    export.write_bytes(page.content)
    env = {"TENANTRY_URL": api.base_url, "TENANTRY_OPERATOR_TOKEN": OPERATOR_TOKEN}
    args = ["billing", "reconcile", "--account", "bill-oa", "--from", today.isoformat(),
            "--to", today.isoformat()]
    code, out, err = await cli(*args, "--export", str(export), env=env)
    assert code == 0, out + err
    # Into a pipe: the table as tab-separated lines, the verdict beside it on stderr.
    assert out.splitlines()[0].startswith("day (UTC)\tstatus\t")
    assert "every day within 1%" in err and "cost not compared" in err
    # And it is listed, newest first: the past reconciliations, as TSV into a pipe.
    verdict = err
    code, out, err = await cli("billing", "reconciliations", "--account", "bill-oa", env=env)
    assert code == 0, err
    header, *rows = [line.split("\t") for line in out.splitlines()]
    assert header[:3] == ["reconciliation_id", "account", "provider"]
    assert rows and {tuple(row[1:3]) for row in rows} == {("bill-oa", "openai")}
    assert f"({rows[0][0]})" in verdict
    code, out, err = await cli("billing", "reconciliations", "--limit", "0", env=env)
    assert (code, out) == (2, "") and err.startswith("error: 400") and err.count("\n") == 1

    # Now they disagree. OpenAI bills a call on yesterday that we never saw, and counts one
    # more output token today than it answered (under 1% of the day: not flagged).
    yesterday = today - timedelta(days=1)
    noon = datetime(yesterday.year, yesterday.month, yesterday.day, 12, tzinfo=UTC)
    openai.usage_log.append(UsageRecord("chatcmpl-unseen", "scripted", 500, 20, 520,
                                        created_at=noon.timestamp()))
    day_output = sum(r.completion_tokens for r in openai.usage_log[:6])
    assert day_output > 100  # so one more token is under 1% of the day
    openai.usage_log[0] = dataclasses.replace(
        openai.usage_log[0], completion_tokens=openai.usage_log[0].completion_tokens + 1)
    # Anthropic billed a call today whose reply we never recorded (>1% of the day).
    anthropic.usage_log.append(UsageRecord("msg_lost", "scripted", 3000, 400, 3400,
                                           provider="anthropic"))

    result = await _reconcile(api, "bill-oa", first, today, fetch={"admin_key": ADMIN_KEY})
    assert result["flagged_days"] == 1
    assert [(d["day"], d["status"]) for d in result["days"]] == [
        (yesterday.isoformat(), "only_provider"), (today.isoformat(), "match")]
    only = _figures(result["days"][0])
    assert only["input_tokens"] == {"name": "input_tokens", "ours": 0, "theirs": 500,
                                    "relative_diff": -1.0, "flagged": True}
    close = _figures(result["days"][1])["output_tokens"]
    assert close["theirs"] == close["ours"] + 1 and not close["flagged"]
    assert 0 < -close["relative_diff"] < 0.01

    result = await _reconcile(api, "bill-an", first, today, fetch={"admin_key": ADMIN_KEY})
    assert result["flagged_days"] == 1
    [day] = result["days"]
    assert (day["day"], day["status"]) == (today.isoformat(), "differs")
    flagged = {name for name, f in _figures(day).items() if f["flagged"]}
    assert flagged == {"input_tokens", "output_tokens", "cost_micros"}

    # The CLI says so with its exit status.
    code, out, err = await cli(*args[:3], "bill-an", "--from", first.isoformat(), "--to",
                               today.isoformat(), "--fetch",
                               env={**env, "TENANTRY_PROVIDER_ADMIN_KEY": ADMIN_KEY})
    assert code == 1, out + err
    [row] = [line.split("\t") for line in out.splitlines()[1:]]
    assert row[:2] == [today.isoformat(), "differs flagged"] and "flagged" in row[3], out
    assert "1 day(s) differ by more than 1%" in err
    assert ADMIN_KEY not in out + err

    # The console shows each account's last reconciliation, the flagged day marked.
    cookie, _ = session.issue(OPERATOR_TOKEN, epoch=epoch.FIRST)
    r = await api.client.get("/console/billing",
                             headers={"Cookie": f"{session.SESSION_COOKIE}={cookie}"})
    assert r.status_code == 200
    html = r.text
    claude = html[html.index('data-account="bill-an"'):]
    claude = claude[:claude.index("</section>")]
    assert f'data-day="{today.isoformat()}" data-status="differs" class="flagged"' in claude
    assert "1 day(s) flagged" in claude
    oa = html[html.index('data-account="bill-oa"'):]
    oa = oa[:oa.index("</section>")]
    assert f'data-day="{yesterday.isoformat()}" data-status="only_provider" class="flagged"' \
        in oa
    assert f'data-day="{today.isoformat()}" data-status="match">' in oa
    assert "Earlier:" in oa  # the agreeing check and the export before this one
    assert ADMIN_KEY not in html

    history = await api.client.get("/admin/v1/billing/reconciliations",
                                   params={"account": "bill-an"}, headers=api.operator)
    assert [(h["flagged_days"], h["source"]) for h in history.json()] == [
        (1, "fetch"), (1, "fetch"), (0, "fetch")]


def _openai_page(start: datetime, **result: Any) -> dict[str, Any]:
    usage = {"object": "organization.usage.completions.result", "input_tokens": 100,
             "input_cached_tokens": 0, "output_tokens": 10, "num_model_requests": 1, **result}
    return {"object": "page", "has_more": False, "next_page": None, "data": [
        {"object": "bucket", "start_time": int(start.timestamp()),
         "end_time": int((start + timedelta(days=1)).timestamp()), "results": [usage]}]}


async def test_a_malformed_export_is_a_clear_400_and_stores_nothing(
    api: Api, providers: tuple[FakeModelServer, FakeModelServer],
) -> None:
    openai, _ = providers
    await api.model_account("bill-oa", openai.base_url)
    today = _today()
    midnight = datetime(today.year, today.month, today.day, tzinfo=UTC)
    base = {"account": "bill-oa", "from": today.isoformat(), "to": today.isoformat()}
    refusals: list[tuple[dict[str, Any] | str, int, str]] = [
        ({**base, "export": {"format": "openai"}}, 400, "usage"),
        ({**base, "export": {"format": "openai", "usage": [_openai_page(
            midnight, output_tokens=-3)]}}, 400, "output_tokens"),
        ({**base, "export": {"format": "openai", "usage": [_openai_page(
            midnight, input_tokens=10**20)]}}, 400, "input_tokens"),
        ({**base, "export": {"format": "openai", "usage": [{"data": []}]}}, 400, "object"),
        ({**base, "export": {"format": "openai", "usage": [_openai_page(
            midnight + timedelta(hours=5))]}}, 400, "whole UTC days"),
        ({**base, "export": {"format": "openai", "usage": [
            _openai_page(midnight), _openai_page(midnight)]}}, 400, "appears twice"),
        ({**base, "export": {"format": "anthropic", "usage": [
            {"data": [], "has_more": False}]}}, 400, "bill-oa is openai"),
        ({**base, "export": {"format": "openai", "usage": [_openai_page(midnight)],
                             "costs": [{"object": "page", "has_more": False, "data": [
                                 {"object": "bucket", "start_time": int(midnight.timestamp()),
                                  "end_time": int(midnight.timestamp()) + 86400,
                                  "results": [{"object": "organization.costs.result",
                                               "amount": {"value": 1.5,
                                                          "currency": "eur"}}]}]}]}},
         400, "only US dollars"),
        ({**base, "fetch": {"admin_key": ADMIN_KEY},
          "export": {"format": "openai", "usage": [_openai_page(midnight)]}}, 400,
         "exactly one"),
        ({**base, "to": (today - timedelta(days=1)).isoformat(),
          "fetch": {"admin_key": ADMIN_KEY}}, 400, "before"),
        ({**base, "from": "9999-12-30", "to": "9999-12-31",
          "fetch": {"admin_key": ADMIN_KEY}}, 400, "only"),
        ({**base, "fetch": {"admin_key": "sk-not-the-admin-key"}}, 400, "refused"),
        ({**base, "account": "no-such-account", "fetch": {"admin_key": ADMIN_KEY}}, 404,
         "No model account"),
        ("{not json", 400, ""),
    ]
    for body, status, words in refusals:
        if isinstance(body, str):
            r = await api.client.post("/admin/v1/billing/reconcile", content=body,
                                      headers={**api.operator,
                                               "Content-Type": "application/json"})
        else:
            r = await api.client.post("/admin/v1/billing/reconcile", json=body,
                                      headers=api.operator)
        assert r.status_code == status, (body, r.text)
        assert r.headers["content-type"] == "application/problem+json"
        problem = r.json()
        assert problem["type"] == ("not_found" if status == 404 else "validation_error")
        assert words in problem["detail"], (words, problem)
        assert "sk-not-the-admin-key" not in r.text
    r = await api.client.get("/admin/v1/billing/reconciliations", headers=api.operator)
    assert r.status_code == 200 and r.json() == []
    cookie, _ = session.issue(OPERATOR_TOKEN, epoch=epoch.FIRST)
    page = await api.client.get("/console/billing",
                                headers={"Cookie": f"{session.SESSION_COOKIE}={cookie}"})
    assert page.status_code == 200 and "No reconciliation yet." in page.text
    assert (await api.client.get("/console/billing")).status_code == 303  # to the login

    # The same export, well formed, is accepted; the CLI's unreadable file is one line.
    ok = await _reconcile(api, "bill-oa", today, today, export={
        "format": "openai", "usage": [_openai_page(midnight)]})
    assert [d["status"] for d in ok["days"]] == ["only_provider"]
    code, _, err = await cli("billing", "reconcile", "--account", "bill-oa", "--from",
                               today.isoformat(), "--to", today.isoformat(), "--export",
                               "/nonexistent/usage.json",
                               env={"TENANTRY_URL": api.base_url,
                                    "TENANTRY_OPERATOR_TOKEN": OPERATOR_TOKEN})
    assert code == 2 and err.startswith("error: cannot read") and "Traceback" not in err
    # An API that does not answer is an error (2), never mistaken for a flagged day (1).
    code, _, err = await cli("billing", "reconcile", "--account", "bill-oa", "--from",
                             today.isoformat(), "--to", today.isoformat(), "--fetch",
                             env={"TENANTRY_URL": f"http://127.0.0.1:{free_port()}",
                                  "TENANTRY_OPERATOR_TOKEN": OPERATOR_TOKEN,
                                  "TENANTRY_PROVIDER_ADMIN_KEY": ADMIN_KEY})
    assert code == 2 and err.startswith("error: cannot reach") and "Traceback" not in err


async def test_a_report_api_that_does_not_answer_is_a_502_problem(
    api: Api, providers: tuple[FakeModelServer, FakeModelServer],
) -> None:
    openai, _ = providers
    await api.model_account("bill-oa", openai.base_url)
    today = _today().isoformat()
    r = await api.client.post("/admin/v1/billing/reconcile", headers=api.operator, json={
        "account": "bill-oa", "from": today, "to": today,
        "fetch": {"admin_key": ADMIN_KEY, "base_url": f"http://127.0.0.1:{free_port()}/v1"}})
    assert r.status_code == 502, r.text
    assert r.json()["type"] == "provider_report_unavailable"
    assert ADMIN_KEY not in r.text
    # A provider without a cost report, asked for one: the same answer, nothing stored.
    async with FakeModelServer(admin_key=ADMIN_KEY) as unpriced:
        r = await api.client.post("/admin/v1/billing/reconcile", headers=api.operator, json={
            "account": "bill-oa", "from": today, "to": today,
            "fetch": {"admin_key": ADMIN_KEY, "base_url": unpriced.base_url}})
        assert r.status_code == 502 and "cost report" in r.json()["detail"]
        ok = await _reconcile(api, "bill-oa", _today(), _today(), fetch={
            "admin_key": ADMIN_KEY, "base_url": unpriced.base_url, "costs": False})
    assert ok["cost_compared"] is False and ok["days"] == []
    history = await api.client.get("/admin/v1/billing/reconciliations", headers=api.operator)
    assert [h["reconciliation_id"] for h in history.json()] == [ok["reconciliation_id"]]
