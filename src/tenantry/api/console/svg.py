"""The console's charts, drawn on the server as inline SVG: no script, no CDN, nothing
fetched (the console's Content-Security-Policy allows none of it anyway). Colours are SVG
presentation attributes, not inline styles, for the same reason.

Every plotted value carries ``data-series``/``data-x``/``data-value`` attributes, and the
page prints the same numbers in a table beside the chart (tests and screen readers read
those, not the pixels). A chart with nothing to plot says "No data" rather than drawing a
line at zero: an empty minute is not a measured zero."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from markupsafe import Markup, escape

WIDTH, HEIGHT = 640, 250
LEFT, RIGHT, TOP, BOTTOM = 64, 12, 14, 58  # plot margins: axis labels, ticks, legend
X_LABELS_SHOWN = 8
# Okabe-Ito: told apart with the common colour-vision deficiencies, dark enough on white.
PALETTE = ("#0072b2", "#d55e00", "#009e73", "#cc79a7", "#e69f00", "#56b4e9", "#000000")
LIMIT_COLOUR = "#cf222e"
Unit = Literal["", "ms", "usd_micros"]


@dataclass(frozen=True, slots=True)
class Series:
    name: str
    values: tuple[float | None, ...]  # one per x label; None: nothing measured there


@dataclass(frozen=True, slots=True)
class Chart:
    key: str  # the element id (also prefixes its title's and description's ids)
    title: str
    x_labels: tuple[str, ...]
    series: tuple[Series, ...]
    kind: Literal["line", "bar"] = "line"
    unit: Unit = ""
    limit: float | None = None  # a cap, drawn as a dashed line
    limit_label: str = ""
    note: str = ""  # what the chart could not source, said under it

    @property
    def empty(self) -> bool:
        return not any(v is not None for s in self.series for v in s.values)

    @property
    def top(self) -> float:
        values = [v for s in self.series for v in s.values if v is not None]
        if self.limit is not None:
            values.append(self.limit)
        return nice_top(max(values, default=0.0))


def nice_top(maximum: float) -> float:
    """The axis's top: the smallest 1, 2, 2.5 or 5 times a power of ten at or above
    ``maximum`` (1 for an all-zero chart, so zeros sit on the axis, no division by zero)."""
    if maximum <= 0 or not math.isfinite(maximum):
        return 1.0
    power = 10.0 ** math.floor(math.log10(maximum))
    for step in (1.0, 2.0, 2.5, 5.0, 10.0):
        if maximum <= step * power * (1 + 1e-9):
            return step * power
    return 10.0 * power  # pragma: no cover - the loop ends at 10


def ticks(top: float, count: int = 4) -> list[float]:
    return [top * i / count for i in range(count + 1)]


def format_value(value: float | None, unit: Unit = "") -> str:
    """Exact, for the data table and hover titles."""
    if value is None:
        return "—"
    if unit == "usd_micros":
        return f"${value / 1e6:,.6f}"
    if unit == "ms":
        return f"{value:,.1f} ms"
    return f"{value:,.0f}" if float(value).is_integer() else f"{value:,.2f}"


def axis_label(value: float, unit: Unit = "") -> str:
    """Short, for the axis: 1.5k, 2M, $0.25, 1.2 s."""
    if unit == "usd_micros":
        dollars = value / 1e6
        if dollars >= 1000:
            return f"${_compact(dollars)}"
        # Down to the micro-dollar: a month of test calls can be a few thousandths.
        return "$" + (f"{dollars:,.2f}" if dollars >= 1 or dollars == 0
                      else f"{dollars:.6f}".rstrip("0"))
    if unit == "ms":
        return f"{value / 1000:g} s" if value >= 1000 else f"{value:g} ms"
    return _compact(value)


def _compact(value: float) -> str:
    for size, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= size:
            return f"{value / size:.3g}{suffix}"
    return f"{value:.3g}"


def _y(value: float, top: float) -> float:
    plot = HEIGHT - TOP - BOTTOM
    return TOP + plot * (1 - value / top)


def _num(value: float) -> str:
    return f"{value:.1f}"


def render(chart: Chart) -> Markup:
    """The chart as one ``<svg>`` element, named by its ``<title>`` (and aria-labelledby)."""
    key = escape(chart.key)
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} {HEIGHT}" '
             f'width="{WIDTH}" height="{HEIGHT}" role="img" class="chart" id="{key}" '
             f'aria-labelledby="{key}-title {key}-desc" data-kind="{chart.kind}" '
             f'data-empty="{"true" if chart.empty else "false"}">',
             f'<title id="{key}-title">{escape(chart.title)}</title>',
             f'<desc id="{key}-desc">{escape(describe(chart))}</desc>']
    if chart.empty:
        parts.append(f'<rect x="{LEFT}" y="{TOP}" width="{WIDTH - LEFT - RIGHT}" '
                     f'height="{HEIGHT - TOP - BOTTOM}" fill="#f6f8fa" stroke="#d8dee4"/>')
        parts.append(f'<text x="{WIDTH / 2:.0f}" y="{(HEIGHT - BOTTOM + TOP) / 2:.0f}" '
                     'text-anchor="middle" fill="#5f6b76" font-size="14" '
                     'class="no-data">No data</text>')
        parts.append("</svg>")
        return Markup("".join(parts))
    top = chart.top
    parts.extend(_axes(chart, top))
    parts.extend(_bars(chart, top) if chart.kind == "bar" else _lines(chart, top))
    if chart.limit is not None:
        y = _num(_y(chart.limit, top))
        parts.append(f'<line x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{y}" y2="{y}" '
                     f'stroke="{LIMIT_COLOUR}" stroke-width="1.5" stroke-dasharray="6 4" '
                     f'class="limit" data-value="{chart.limit:g}"/>')
        parts.append(f'<text x="{WIDTH - RIGHT - 4}" y="{float(y) - 4:.1f}" text-anchor="end" '
                     f'font-size="11" fill="{LIMIT_COLOUR}">'
                     f'{escape(chart.limit_label or "cap")} '
                     f'{escape(format_value(chart.limit, chart.unit))}</text>')
    parts.extend(_legend(chart))
    parts.append("</svg>")
    return Markup("".join(parts))


def describe(chart: Chart) -> str:
    """A sentence for screen readers: what is plotted and its largest value."""
    if chart.empty:
        return f"{chart.title}: no data."
    peaks = []
    for s in chart.series:
        shown = [v for v in s.values if v is not None]
        if shown:
            peaks.append(f"{s.name} up to {format_value(max(shown), chart.unit)}")
    span = (f" from {chart.x_labels[0]} to {chart.x_labels[-1]}"
            if len(chart.x_labels) > 1 else "")
    return f"{chart.title}{span}: " + "; ".join(peaks) + ". The numbers are in the table."


def _axes(chart: Chart, top: float) -> list[str]:
    out = []
    for value in ticks(top):
        y = _num(_y(value, top))
        out.append(f'<line x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{y}" y2="{y}" '
                   f'stroke="{"#8c959f" if value == 0 else "#eaeef2"}"/>')
        out.append(f'<text x="{LEFT - 6}" y="{float(y) + 4:.1f}" text-anchor="end" '
                   f'font-size="11" fill="#5f6b76" class="tick">'
                   f'{escape(axis_label(value, chart.unit))}</text>')
    count = len(chart.x_labels)
    every = max(1, math.ceil(count / X_LABELS_SHOWN))
    for i, label in enumerate(chart.x_labels):
        last = i == count - 1
        # The last label always; a regular one too close before it is left out.
        if (i % every and not last) or (not last and every > 1 and count - 1 - i < every):
            continue
        # A line's last point sits on the plot's edge: its label ends there, not past it.
        anchor = "end" if last and chart.kind == "line" and count > 1 else "middle"
        out.append(f'<text x="{_num(_x_center(chart, i))}" y="{HEIGHT - BOTTOM + 16}" '
                   f'text-anchor="{anchor}" font-size="11" fill="#5f6b76">'
                   f'{escape(label)}</text>')
    return out


def _x_center(chart: Chart, i: int) -> float:
    width = WIDTH - LEFT - RIGHT
    count = len(chart.x_labels)
    if chart.kind == "bar" or count == 1:
        return LEFT + width * (i + 0.5) / count
    return LEFT + width * i / (count - 1)


def _point_attrs(chart: Chart, s: Series, i: int, value: float) -> str:
    return (f'data-series="{escape(s.name)}" data-x="{escape(chart.x_labels[i])}" '
            f'data-value="{value:g}"')


def _lines(chart: Chart, top: float) -> list[str]:
    out = []
    for n, s in enumerate(chart.series):
        colour = PALETTE[n % len(PALETTE)]
        segment: list[str] = []
        segments = []
        for i, value in enumerate(s.values):
            if value is None:  # a gap, not a drop to zero
                if segment:
                    segments.append(segment)
                segment = []
                continue
            segment.append(f"{_num(_x_center(chart, i))},{_num(_y(value, top))}")
        if segment:
            segments.append(segment)
        for points in segments:
            if len(points) > 1:
                out.append(f'<polyline fill="none" stroke="{colour}" stroke-width="2" '
                           f'points="{" ".join(points)}"/>')
        for i, value in enumerate(s.values):
            if value is None:
                continue
            out.append(f'<circle cx="{_num(_x_center(chart, i))}" cy="{_num(_y(value, top))}" '
                       f'r="2.5" fill="{colour}" {_point_attrs(chart, s, i, value)}>'
                       f'<title>{escape(s.name)} at {escape(chart.x_labels[i])}: '
                       f'{escape(format_value(value, chart.unit))}</title></circle>')
    return out


def _bars(chart: Chart, top: float) -> list[str]:
    out = []
    count, kinds = len(chart.x_labels), max(len(chart.series), 1)
    group = (WIDTH - LEFT - RIGHT) / count
    bar = group * 0.8 / kinds
    base = _y(0, top)
    for n, s in enumerate(chart.series):
        colour = PALETTE[n % len(PALETTE)]
        for i, value in enumerate(s.values):
            if value is None:
                continue
            x = LEFT + group * i + group * 0.1 + bar * n
            y = _y(value, top)
            out.append(f'<rect x="{_num(x)}" y="{_num(y)}" width="{_num(max(bar - 1, 1))}" '
                       f'height="{_num(base - y)}" fill="{colour}" '
                       f'{_point_attrs(chart, s, i, value)}>'
                       f'<title>{escape(s.name)} · {escape(chart.x_labels[i])}: '
                       f'{escape(format_value(value, chart.unit))}</title></rect>')
    return out


def _legend(chart: Chart) -> list[str]:
    out = []
    x, y = LEFT, HEIGHT - 16
    for n, s in enumerate(chart.series):
        colour = PALETTE[n % len(PALETTE)]
        out.append(f'<rect x="{x}" y="{y - 9}" width="10" height="10" fill="{colour}"/>')
        out.append(f'<text x="{x + 14}" y="{y}" font-size="11" fill="#1b1f23">'
                   f'{escape(s.name)}</text>')
        x += 24 + 7 * len(s.name)
    return out
