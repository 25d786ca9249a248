"""The reconciliation's arithmetic: the 1% line, zero on the provider's side, days on one
side only, and the providers' report formats read into the same figures."""

from __future__ import annotations

from datetime import date

import pytest

from tenantry.errors import ValidationFailed
from tenantry.ledger.provider_reports import (
    AnthropicExport,
    DayUsage,
    OpenAIExport,
    ProviderUsage,
    covered_days,
    provider_usage,
)
from tenantry.ledger.reconcile import compare, compare_day

DAY = date(2026, 11, 30)
OPENAI = frozenset({"requests", "input_tokens", "cached_input_tokens", "output_tokens",
                    "cost_micros"})


def _usage(input_tokens: int, *, cost: int | None = 1000, requests: int | None = 10,
           output: int = 100) -> DayUsage:
    return DayUsage(DAY, requests, input_tokens, 0, None, output, cost)


def test_exactly_one_percent_is_within_and_one_token_more_is_flagged() -> None:
    within = compare_day(DAY, _usage(10_100), _usage(10_000), OPENAI)
    assert within.status == "match" and not within.flagged
    over = compare_day(DAY, _usage(10_101), _usage(10_000), OPENAI)
    assert over.status == "differs"
    [flagged] = [f for f in over.figures if f.flagged]
    assert (flagged.name, flagged.ours, flagged.theirs) == ("input_tokens", 10_101, 10_000)
    assert flagged.relative_diff == pytest.approx(0.0101)
    under = compare_day(DAY, _usage(9_899), _usage(10_000), OPENAI)  # we under-count too
    assert under.flagged


def test_a_provider_zero_is_matched_only_by_zero() -> None:
    zero = compare_day(DAY, _usage(0, output=0, cost=0), _usage(0, output=0, cost=0), OPENAI)
    assert zero.status == "match"
    assert all(f.relative_diff in (0.0, None) for f in zero.figures)
    extra = compare_day(DAY, _usage(100, cost=5), _usage(100, cost=0), OPENAI)
    [cost] = [f for f in extra.figures if f.flagged]
    assert (cost.name, cost.relative_diff) == ("cost_micros", None)


def test_days_on_one_side_are_flagged_and_unreported_figures_not_compared() -> None:
    figures = frozenset({"input_tokens", "output_tokens"})  # no costs, no request count
    rows = compare({DAY: _usage(100, cost=None)},
                   ProviderUsage({date(2026, 12, 1): _usage(50)}, figures),
                   date(2026, 11, 1), date(2026, 12, 31))
    assert [(r.day, r.status, r.flagged) for r in rows] == [
        (DAY, "only_ours", True), (date(2026, 12, 1), "only_provider", True)]
    assert {f.name for r in rows for f in r.figures} == figures
    # Days of the export outside the window are not rows.
    assert compare({}, ProviderUsage({DAY: _usage(5)}, figures), date(2026, 12, 1),
                   date(2026, 12, 2)) == ()


def test_the_two_formats_give_the_same_figures() -> None:
    openai = OpenAIExport.model_validate({"format": "openai", "usage": [{
        "object": "page", "has_more": False, "next_page": None, "data": [{
            "object": "bucket", "start_time": 1795996800, "end_time": 1796083200,
            "results": [
                {"object": "organization.usage.completions.result", "input_tokens": 1000,
                 "input_cached_tokens": 800, "output_tokens": 500, "num_model_requests": 5,
                 "model": "gpt-4o", "project_id": None, "api_key_id": None, "batch": None},
                {"object": "organization.usage.completions.result", "input_tokens": 30,
                 "output_tokens": 3, "num_model_requests": 1, "new_field": {"x": 1}}]}]}],
        "costs": [{"object": "page", "has_more": False, "data": [{
            "object": "bucket", "start_time": 1795996800, "end_time": 1796083200,
            "results": [{"object": "organization.costs.result",
                         "amount": {"value": 0.06, "currency": "usd"}, "line_item": None}]}]}]})
    assert provider_usage(openai).days == {
        DAY: DayUsage(DAY, 6, 1030, 800, None, 503, 60_000)}

    anthropic = AnthropicExport.model_validate({"format": "anthropic", "usage": [{
        "has_more": False, "next_page": None, "data": [{
            "starting_at": "2026-11-30T00:00:00Z", "ending_at": "2026-12-01T00:00:00Z",
            "results": [{"uncached_input_tokens": 1500, "cache_read_input_tokens": 200,
                         "cache_creation": {"ephemeral_1h_input_tokens": 1000,
                                            "ephemeral_5m_input_tokens": 500},
                         "output_tokens": 500, "server_tool_use": {"web_search_requests": 1},
                         "model": "claude-sonnet-4", "service_tier": "standard"}]}]}],
        "costs": [{"has_more": False, "data": [{
            "starting_at": "2026-11-30T00:00:00Z", "ending_at": "2026-12-01T00:00:00Z",
            "results": [{"amount": "123.45", "currency": "USD"}]}]}]})
    report = provider_usage(anthropic)
    # Every input token counts, as our usage facts count them: uncached + reads + writes.
    assert report.days == {DAY: DayUsage(DAY, None, 3200, 200, 1500, 500, 1_234_500)}
    assert "requests" not in report.figures and "cost_micros" in report.figures


def test_an_hourly_bucket_is_refused() -> None:
    hourly = OpenAIExport.model_validate({"format": "openai", "usage": [{
        "object": "page", "has_more": False, "data": [{
            "object": "bucket", "start_time": 1795996800, "end_time": 1796000400,
            "results": []}]}]})
    with pytest.raises(ValidationFailed, match="whole UTC days"):
        provider_usage(hourly)


def _openai_day(start: int, *, costs: bool) -> OpenAIExport:
    bucket = {"object": "bucket", "start_time": start, "end_time": start + 86_400,
              "results": []}
    return OpenAIExport.model_validate({
        "format": "openai", "usage": [{"object": "page", "has_more": False, "data": [bucket]}],
        "costs": [{"object": "page", "has_more": False, "data": []}] if costs else None})


def test_a_day_is_covered_when_the_report_has_its_bucket_used_or_not() -> None:
    # An empty bucket still says the provider's report reaches the day (nothing used).
    assert covered_days(_openai_day(1795996800, costs=False)) == {DAY}
    # With the cost report asked for, both parts must reach it.
    assert covered_days(_openai_day(1795996800, costs=True)) == frozenset()


def test_a_days_difference_is_its_largest_relative_figure() -> None:
    row = compare_day(DAY, _usage(10_300, output=99), _usage(10_000), OPENAI)
    assert row.difference == pytest.approx(0.03)
    assert compare_day(DAY, _usage(5), _usage(5), OPENAI).difference == 0
    # A figure the provider reports as 0 and we do not: all of it differs.
    assert compare_day(DAY, _usage(5, cost=7), _usage(5, cost=0), OPENAI).difference == 1
