"""The client SDK's retry rules and error mapping without a server: which failures are
sent again (and after how long), which are raised at once, and which exception each error
answer becomes. (Against the real platform, through a refusing proxy:
tests/integration/test_client_sdk.py.)"""

from __future__ import annotations

import email.utils
import time

import httpx2
import orjson
import pytest

from tenantry.client import (
    ApiError,
    BudgetExhausted,
    Client,
    ClientError,
    Conflict,
    ConnectionFailed,
    NotFound,
    Overloaded,
    QuotaExceeded,
    ServerError,
    TenantMoving,
    Unauthorized,
    Unavailable,
    ValidationError,
)
from tenantry.client._retry import Attempts, RetryPolicy
from tenantry.client.errors import error_for, parse_retry_after
from tenantry.errors import TenantryError


def _problem(status: int, type_: str, retry_after: int | None = None,
             **extra: object) -> ApiError:
    headers = {"content-type": "application/problem+json"}
    if retry_after is not None:
        headers["retry-after"] = str(retry_after)
    body = orjson.dumps({"type": type_, "title": "t", "status": status, "detail": "d", **extra})
    return error_for(status, headers, body)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_each_problem_type_is_its_own_exception_with_the_answers_fields() -> None:
    cases = {
        (400, "validation_error"): ValidationError, (401, "unauthorized"): Unauthorized,
        (404, "not_found"): NotFound, (409, "conflict"): Conflict,
        (429, "quota_exceeded"): QuotaExceeded, (429, "budget_exhausted"): BudgetExhausted,
        (503, "overloaded"): Overloaded, (429, "overloaded"): Overloaded,
        (503, "tenant_moving"): TenantMoving, (500, "vault_error"): ServerError,
        (418, "teapot"): ApiError, (503, "something_new"): Unavailable,
    }
    for (status, type_), kind in cases.items():
        error = _problem(status, type_, run_id="run_1")
        assert type(error) is kind, (status, type_)
        assert (error.status, error.type, error.detail) == (status, type_, "d")
        assert error.extra == {"run_id": "run_1"} and error.problem["title"] == "t"
        assert isinstance(error, ClientError) and isinstance(error, TenantryError)
    moving = _problem(503, "tenant_moving", retry_after=5)
    assert moving.retry_after == 5.0 and moving.retryable


def test_an_answer_that_is_not_a_problem_is_read_as_well_as_it_can_be() -> None:
    error = error_for(502, {"content-type": "text/html"}, b"<h1>Bad gateway</h1>")
    assert type(error) is ServerError and error.status == 502 and error.type == "http_error"
    assert "Bad gateway" in error.detail
    assert type(error_for(404, {}, b"")) is NotFound
    # A problem that names its wait only in the body.
    assert _problem(503, "overloaded", shed=["batch"], retry_after=None).retry_after is None
    assert error_for(503, {"content-type": "application/problem+json"}, orjson.dumps(
        {"type": "overloaded", "retry_after": 7})).retry_after == 7.0


def test_retry_after_is_seconds_or_a_date() -> None:
    assert parse_retry_after("3") == 3.0 and parse_retry_after(" 1.5 ") == 1.5
    assert parse_retry_after("-4") == 0.0 and parse_retry_after(None) is None
    assert parse_retry_after("soon") is None
    in_ten = email.utils.formatdate(time.time() + 10, usegmt=True)
    assert 8.0 <= (parse_retry_after(in_ten) or 0) <= 10.0


def test_transient_refusals_are_retried_after_their_retry_after() -> None:
    clock = Clock()
    attempts = Attempts(RetryPolicy(max_retries=3, deadline=60), idempotent=True, clock=clock)
    assert attempts.after_answer(_problem(503, "overloaded", retry_after=2)) == 2.0
    assert attempts.after_answer(_problem(503, "database_unavailable", retry_after=5)) == 5.0
    assert attempts.after_answer(_problem(429, "overloaded", retry_after=1)) == 1.0
    assert attempts.after_answer(_problem(503, "overloaded", retry_after=1)) is None  # 3 done


def test_tenant_limits_and_client_errors_are_not_retried() -> None:
    attempts = Attempts(RetryPolicy(), idempotent=True)
    for status, type_ in [(429, "quota_exceeded"), (429, "budget_exhausted"),
                          (400, "validation_error"), (404, "not_found"), (409, "conflict"),
                          (500, "internal_error"), (401, "unauthorized")]:
        assert attempts.after_answer(_problem(status, type_)) is None, type_
    assert attempts.retries == 0


def test_a_call_not_safe_to_repeat_is_sent_again_only_when_it_never_left() -> None:
    attempts = Attempts(RetryPolicy(), idempotent=False, rng=lambda: 1.0)
    assert attempts.after_answer(_problem(503, "overloaded", retry_after=1)) is None
    assert attempts.after_error(httpx2.ReadError("reset")) is None
    assert attempts.after_error(httpx2.RemoteProtocolError("cut")) is None
    assert attempts.after_error(httpx2.ReadTimeout("slow")) is None
    assert attempts.after_error(httpx2.ConnectError("refused")) == 0.25
    assert attempts.after_error(httpx2.PoolTimeout("busy")) == 0.5
    safe = Attempts(RetryPolicy(), idempotent=True, rng=lambda: 0.0)
    assert safe.after_error(httpx2.ReadError("reset")) == 0.125


def test_backoff_doubles_with_jitter_up_to_its_cap() -> None:
    policy = RetryPolicy(backoff=0.5, max_backoff=3.0)
    assert [policy.backoff_for(n, lambda: 1.0) for n in range(1, 6)] == [0.5, 1, 2, 3, 3]
    assert [policy.backoff_for(n, lambda: 0.0) for n in range(1, 4)] == [0.25, 0.5, 1.0]


def test_no_wait_is_started_that_would_end_past_the_deadline() -> None:
    clock = Clock()
    attempts = Attempts(RetryPolicy(max_retries=10, deadline=5), idempotent=True, clock=clock)
    assert attempts.after_answer(_problem(503, "overloaded", retry_after=3)) == 3.0
    clock.now += 3.5
    assert attempts.after_answer(_problem(503, "overloaded", retry_after=3)) is None
    assert attempts.after_answer(_problem(503, "overloaded", retry_after=1)) == 1.0


def _mock(answers: list[httpx2.Response | Exception]) -> tuple[
        httpx2.MockTransport, list[httpx2.Request]]:
    seen: list[httpx2.Request] = []

    def handler(request: httpx2.Request) -> httpx2.Response:
        seen.append(request)
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    return httpx2.MockTransport(handler), seen


STARTED = {"run_id": "run_1", "status": "queued", "events_url": "/v1/runs/run_1/events"}


def test_a_start_is_sent_with_one_key_on_every_attempt() -> None:
    refused = httpx2.Response(503, headers={"retry-after": "0"}, json={"type": "overloaded"})
    transport, seen = _mock([refused, httpx2.ReadError("lost"), httpx2.Response(202,
                                                                               json=STARTED)])
    with Client("http://platform.test", "tnt_k", transport=transport) as client:
        started = client.runs.create("agt_1", {"q": 1}, version=2, webhook="https://h.test/w")
    keys = {r.headers["idempotency-key"] for r in seen}
    assert len(seen) == 3 and keys == {started.idempotency_key}
    assert orjson.loads(seen[0].content) == {"agent_id": "agt_1", "input": {"q": 1},
                                             "version": 2, "webhook": "https://h.test/w"}
    assert seen[0].headers["authorization"] == "Bearer tnt_k"
    assert seen[0].headers["content-type"] == "application/json"
    assert started.run_id == "run_1"


def test_a_platform_that_never_answers_is_a_connection_failure() -> None:
    transport, seen = _mock([httpx2.ConnectError("refused")] * 3)
    with Client("http://platform.test", "tnt_k", transport=transport, max_retries=2) as client, \
            pytest.raises(ConnectionFailed) as failed:
        client.runs.get("run_1")
    assert len(seen) == 3 and isinstance(failed.value.__cause__, httpx2.ConnectError)


def test_each_retry_is_told_why_and_how_long_is_left() -> None:
    from tenantry.client._retry import Retrying

    refused = httpx2.Response(503, headers={"retry-after": "0"}, json={
        "type": "about:blank", "title": "Unavailable", "status": 503,
        "detail": "the database is failing over"})
    transport, _ = _mock([refused, httpx2.ConnectError("refused"),
                          httpx2.Response(200, json={"data": [], "next_cursor": None})])
    told: list[Retrying] = []
    with Client("http://platform.test", "tnt_k", transport=transport,
                on_retry=told.append) as client:
        assert list(client.agents.list().data) == []
    assert [(t.reason, t.retry) for t in told] == [
        ("the platform answered 503 (the database is failing over)", 1),
        ("GET /v1/agents: ConnectError: refused", 2)]
    assert all(0 < t.seconds_left <= 60 for t in told)
