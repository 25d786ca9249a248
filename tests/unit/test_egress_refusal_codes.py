"""What a refused egress attempt is recorded as: a bounded reason code
that never carries what a name resolved to, and a bounded number of events per call."""

from __future__ import annotations

import pytest

from tenantry.runs.tool_step import MAX_EGRESS_EVENTS_PER_CALL, egress_events
from tenantry.sandbox.egress.policy import EgressPolicy, Refusal
from tenantry.sandbox.egress.proxy import _reason_code
from tenantry.sandbox.egress.refusals import REASON_CODES, EgressRefusal

POLICY = EgressPolicy(("api.example.com", "inside.example"))


@pytest.mark.parametrize(("host", "port", "status", "code"), [
    ("169.254.169.254", 80, 403, "metadata_address"),
    ("[fe80::1]", 80, 403, "metadata_address"),
    ("10.0.0.5", 443, 403, "internal_address"),
    ("127.0.0.1", 443, 403, "internal_address"),
    ("evil.example", 443, 403, "not_allowed"),
    ("api.example.com", 22, 403, "not_allowed"),
    ("inside.example", 443, 403, "internal_address"),  # allowed name resolving inside
    ("api.example.com", 443, 502, None),  # allowed, but down: not an attempt to get out
    ("api.example.com", 443, 504, None),
])
def test_refusals_get_a_bounded_reason_code(host: str, port: int, status: int,
                                            code: str | None) -> None:
    got = _reason_code(host, port, POLICY, Refusal(status, "why"))
    assert got == code and (got is None or got in REASON_CODES)


def test_one_event_per_attempt_up_to_the_cap_then_folded_per_reason() -> None:
    many = tuple(EgressRefusal(f"h{i}.example", 443, "not_allowed")
                 for i in range(MAX_EGRESS_EVENTS_PER_CALL + 30))
    metadata = (EgressRefusal("169.254.169.254", 80, "metadata_address"),) * 5
    events = egress_events("run_x:2:0", many + metadata, dropped=100)
    assert len(events) == MAX_EGRESS_EVENTS_PER_CALL + 2
    assert all(e.count == 1 for e in events[:MAX_EGRESS_EVENTS_PER_CALL])
    folded = {e.reason_code: e for e in events[MAX_EGRESS_EVENTS_PER_CALL:]}
    assert folded["not_allowed"].count == 30
    assert folded["not_allowed"].host == f"h{MAX_EGRESS_EVENTS_PER_CALL}.example"
    assert folded["metadata_address"].count == 5 + 100  # the unkept ones count too
    assert sum(e.count for e in events) == len(many) + len(metadata) + 100
