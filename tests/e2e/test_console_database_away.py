"""The consoles while the database is away: a person in a browser reads a page saying so
(503, Retry-After, the page reloading itself), not the API's problem+json; the JSON API
still answers problem+json; ``/healthz`` stays 200 while ``/readyz`` names the database.
A real ``tenantry api`` on a cluster this test owns and stops."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import httpx2
import pytest

from tests.support.api_process import api_process
from tests.support.outage import migrate
from tests.support.pgcluster import PgCluster
from tests.support.waiting import until

pytestmark = pytest.mark.e2e

HTML = {"Accept": "text/html,application/xhtml+xml"}
AWAY = "The database is unavailable"
#: A link of the shape the platform makes (another is refused without asking the database).
LINK = "tsl_" + "a" * 43


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[PgCluster]:
    with PgCluster(tmp_path / "pg") as owned:
        yield owned


def csrf_of(page: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', page)
    assert found is not None, page
    return found[1]


def assert_away_page(answer: httpx2.Response) -> None:
    assert answer.status_code == 503, answer.text
    assert answer.headers["content-type"].startswith("text/html"), answer.headers
    assert answer.headers["retry-after"].isdigit()
    assert AWAY in answer.text and "<html" in answer.text


@pytest.mark.timeout(180)
async def test_consoles_answer_a_page_while_the_database_is_away(
    cluster: PgCluster, tmp_path: Path,
) -> None:
    dsn = cluster.dsn()
    await migrate(dsn, tmp_path)
    async with api_process(dsn, tmp_path / "api") as api, httpx2.AsyncClient(
            base_url=api.base_url, timeout=10, headers=HTML) as browser:
        tenant = (await browser.post("/admin/v1/tenants", json={"name": "Away"},
                                     headers=api.operator)).json()
        key = (await browser.post(f"/admin/v1/tenants/{tenant['tenant_id']}/api-keys",
                                  headers=api.operator)).json()["api_key"]
        # Logged in to the operator console, and half-way through the tenant console's
        # sign-in, while the database answers.
        login_form = (await browser.get("/console/login")).text
        signed_in = await browser.post("/console/login", data={
            "token": api.operator["Authorization"].removeprefix("Bearer "),
            "csrf": csrf_of(login_form)})
        assert signed_in.status_code == 303, signed_in.text
        sign_in_form = (await browser.get("/app/sign-in", params={"token": LINK})).text

        cluster.crash()

        runs_page = await browser.get("/console/runs")
        assert_away_page(runs_page)
        assert 'http-equiv="refresh"' in runs_page.text  # it retries by itself
        assert_away_page(await browser.post("/console/login", data={
            "token": "whatever", "csrf": csrf_of(login_form)}))
        assert_away_page(await browser.post("/app/sign-in", data={
            "token": LINK, "csrf": csrf_of(sign_in_form)}))
        # The JSON API is not a page, whatever the client accepts.
        api_answer = await browser.get("/v1/runs", headers={"Authorization": f"Bearer {key}"})
        assert api_answer.status_code == 503
        assert api_answer.headers["content-type"] == "application/problem+json"
        assert api_answer.json()["type"] == "database_unavailable"
        assert (await browser.get("/healthz")).status_code == 200
        ready = await browser.get("/readyz")
        assert ready.status_code == 503 and "database" in ready.json()["detail"], ready.text

        cluster.start()

        async def console_back() -> bool:
            return (await browser.get("/console/runs")).status_code == 200

        await until(console_back, "the console answers again", 60, api.tail)
