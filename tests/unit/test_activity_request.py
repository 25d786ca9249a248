"""What an attempt request accepts before any sandbox is claimed: the key is the same for
every attempt of a task, and secrets, input and numbers that the guest contract cannot
carry are refused with one-line ValueErrors."""

from __future__ import annotations

from typing import Any

import pytest

from tenantry.activities import AttemptRequest, Bundle
from tenantry.activities.code.attempt import MAX_INPUT_BYTES, MAX_SECRETS_BYTES
from tenantry.ids import TenantId

BUNDLE = Bundle({"main.py": b"def handle(value, context):\n    return value\n"},
                "main.py:handle")


def make(**fields: Any) -> AttemptRequest:
    values: dict[str, Any] = {"tenant": TenantId("tenant-a"), "task_id": "tsk_9",
                              "attempt": 1, "activity": "send_invoice", "version": 3,
                              "bundle": BUNDLE, "input": {"n": 1}, "timeout_s": 10.0}
    return AttemptRequest(**{**values, **fields})


def test_the_idempotency_key_is_stable_across_attempts_and_ids_are_not() -> None:
    first, second = make(), make(attempt=2)
    assert first.idempotency_key == second.idempotency_key == "tsk_9:send_invoice"
    assert first.id != second.id  # each attempt binds its own sandbox


@pytest.mark.parametrize(("fields", "problem"), [
    ({"secrets": {"BAD-NAME": "x"}}, "environment variable name"),
    ({"secrets": {"A": "x\x00y"}}, "NUL"),
    ({"secrets": {"A": "x" * MAX_SECRETS_BYTES}}, "secrets are at most"),
    ({"input": "x" * MAX_INPUT_BYTES}, "input is at most"),
    ({"input": {1, 2}}, "must be JSON"),
    ({"timeout_s": 0}, "timeout must be positive"),
    ({"heartbeat_timeout_s": -1.0}, "heartbeat timeout must be positive"),
    ({"attempt": 0}, "numbered from 1"),
    ({"task_id": ""}, "task id"),
])
def test_what_the_guest_contract_cannot_carry_is_refused(
    fields: dict[str, Any], problem: str,
) -> None:
    with pytest.raises(ValueError, match=problem):
        make(**fields)


def test_a_tool_calls_task_shows_the_guest_the_calls_key() -> None:
    from tenantry.activities import Bundle
    from tenantry.activities.code.attempt import AttemptRequest
    from tenantry.ids import TenantId

    base = {"tenant": TenantId.parse("tenant-a"), "task_id": "run_t", "attempt": 1,
            "activity": "send_invoice", "version": 1, "input": {}, "timeout_s": 1.0,
            "bundle": Bundle({"main.py": b"def handle(v, c): return v"}, "main.py:handle")}
    assert AttemptRequest(**base).idempotency_key == "run_t:send_invoice"
    assert AttemptRequest(**base, key="run_p:2:0").idempotency_key == "run_p:2:0"
