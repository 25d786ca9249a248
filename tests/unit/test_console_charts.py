"""The console's SVG charts (svg.py) and the figures behind them (chart_data.py): axis
scales, what an empty chart says, that every plotted value is in the SVG as a data
attribute, and the percentiles and minute buckets of the queue-wait chart."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pytest

from tenantry.api.console import chart_data, svg
from tenantry.api.console.chart_data import RunTimes, TenantFigures, Window
from tenantry.ids import TenantId


@pytest.mark.parametrize(("maximum", "top"), [
    (0, 1), (-3, 1), (1, 1), (1.2, 2), (2, 2), (2.1, 2.5), (3, 5), (7, 10), (10, 10),
    (11, 20), (0.03, 0.05), (980, 1000), (1_250_000, 2_000_000)])
def test_the_axis_top_is_a_round_number_at_or_above_the_largest_value(
        maximum: float, top: float) -> None:
    assert svg.nice_top(maximum) == pytest.approx(top)
    assert svg.ticks(svg.nice_top(maximum))[-1] == pytest.approx(top)


def _values(drawn: str) -> list[tuple[str, str, float]]:
    return [(s, x, float(v)) for s, x, v in re.findall(
        r'data-series="([^"]*)" data-x="([^"]*)" data-value="([^"]*)"', drawn)]


def test_an_empty_chart_says_no_data_and_draws_no_zero_line() -> None:
    for chart in (svg.Chart("c", "Nothing", (), ()),
                  svg.Chart("c", "Gaps only", ("a", "b"), (svg.Series("s", (None, None)),))):
        drawn = str(svg.render(chart))
        assert "No data" in drawn and 'data-empty="true"' in drawn
        assert "<polyline" not in drawn and "<circle" not in drawn and _values(drawn) == []
        assert '<title id="c-title">' in drawn and 'aria-labelledby="c-title c-desc"' in drawn


def test_zeros_are_data_and_sit_on_the_axis() -> None:
    drawn = str(svg.render(svg.Chart("z", "Zeros", ("a", "b"), (svg.Series("s", (0, 0)),))))
    assert "No data" not in drawn
    assert [v for _, _, v in _values(drawn)] == [0, 0]
    ys = {float(y) for y in re.findall(r'<circle cx="[^"]+" cy="([^"]+)"', drawn)}
    assert ys == {svg.HEIGHT - svg.BOTTOM}  # the bottom of the plot


def test_every_value_is_plotted_with_its_series_and_label_and_scaled_to_the_axis() -> None:
    chart = svg.Chart("b", "Bars <&>", ("x1", "x2", "x3"),
                      (svg.Series("one", (1, None, 4)), svg.Series("two", (2, 3, 0))),
                      kind="bar", limit=5, limit_label="cap")
    drawn = str(svg.render(chart))
    assert _values(drawn) == [("one", "x1", 1), ("one", "x3", 4), ("two", "x1", 2),
                              ("two", "x2", 3), ("two", "x3", 0)]
    assert "Bars &lt;&amp;&gt;" in drawn  # names are escaped
    assert 'class="limit" data-value="5"' in drawn
    plot = svg.HEIGHT - svg.TOP - svg.BOTTOM
    heights = [float(h) for h in re.findall(r'<rect x="[^"]+" y="[^"]+" width="[^"]+" '
                                            r'height="([^"]+)" fill="#', drawn)]
    # The axis tops at 5 (the cap): a bar of 4 is four fifths of the plot.
    assert heights[1] == pytest.approx(plot * 4 / 5, abs=0.1)


def test_a_line_breaks_at_a_minute_with_no_value() -> None:
    drawn = str(svg.render(svg.Chart("l", "Gap", ("a", "b", "c", "d"),
                                     (svg.Series("s", (1, 2, None, 3)),))))
    assert drawn.count("<polyline") == 1  # a,b joined; d alone is a point only
    assert len(_values(drawn)) == 3


def test_money_is_shown_in_dollars_from_micro_dollars() -> None:
    assert svg.format_value(1_500, "usd_micros") == "$0.001500"
    assert svg.axis_label(2_500_000, "usd_micros") == "$2.50"
    assert svg.axis_label(2_500, "usd_micros") == "$0.0025"  # not $0.00
    assert svg.axis_label(0, "usd_micros") == "$0.00"
    assert svg.axis_label(1500, "ms") == "1.5 s" and svg.format_value(None) == "—"


def test_percentiles_match_postgres_percentile_cont() -> None:
    assert chart_data.percentile([10, 20, 30, 40], 0.5) == 25
    assert chart_data.percentile([10, 20, 30, 40], 0.95) == pytest.approx(38.5)
    assert chart_data.percentile([7], 0.95) == 7
    with pytest.raises(ValueError, match="no values"):
        chart_data.percentile([], 0.5)


def test_runs_and_waits_fall_in_the_minute_they_happened() -> None:
    now = datetime(2025, 3, 14, 12, 30, 45, tzinfo=UTC)
    w = Window.at(now)
    assert len(w.minutes) == 60 and w.minutes[-1] == now.replace(second=0)
    assert w.day_labels()[0] == "2025-03-01" and w.day_labels()[-1] == "2025-03-14"
    at = w.minutes[-3] + timedelta(seconds=10)
    old = w.since - timedelta(minutes=5)
    f = TenantFigures(TenantId.new(), "pro", 0, 10, 0, 100, None, runs=[
        RunTimes(at - timedelta(milliseconds=200), at, at + timedelta(minutes=1)),
        RunTimes(at - timedelta(milliseconds=400), at, None),
        RunTimes(old, old, at),  # started before the hour: its end only
    ])
    runs = chart_data.runs_chart([f], w, single=True)
    started, finished = runs.series
    assert started.values[-3] == 2 and sum(v or 0 for v in started.values) == 2
    assert finished.values[-3] == 1 and finished.values[-2] == 1  # the old run, then the first
    p50, p95 = chart_data.wait_chart([f], w, single=True).series
    assert p50.values[-3] == pytest.approx(300) and p95.values[-3] == pytest.approx(390)
    assert p50.values[0] is None  # no claim in that minute: no point, not a zero
    by_class = chart_data.runs_chart([f], w, single=False)
    assert [s.name for s in by_class.series] == ["started · pro", "finished · pro"]
