"""A run trace (``tenantry.runs.trace.build_trace``) laid out as a waterfall: one bar per
span, positioned in per-mille of the run's wall time, drawn as SVG attributes (the
console's Content-Security-Policy allows no inline styles)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

MAX_SPANS = 400  # bounded page: a run of thousands of steps shows its first spans
FAILED_OUTCOMES = ("error", "unknown")  # a tool span's outcome (runs/trace.py)
#: Spans that are the run waiting; a child run's (a "tool" span) is one too.
WAIT_KINDS = ("approval", "parked")
KINDS = ("queue", "platform", "gateway", "model", "tool", "sandbox", "approval", "parked")
TOTALS = (("platform_ms", "platform"), ("gateway_ms", "model gateway"),
          ("model_ms", "model provider"), ("tool_ms", "tool"),
          ("sandbox_ms", "sandbox (within tool)"), ("queue_ms", "queue"),
          ("approval_ms", "approval wait"), ("parked_ms", "parked"))


@dataclass(frozen=True, slots=True)
class Bar:
    kind: str  # one of KINDS, or "other": also the bar's CSS class
    label: str
    seq: int | None
    start_ms: float
    duration_ms: float
    x: float  # 0..1000
    width: float  # 0..1000, at least 1 so a sub-pixel span stays visible
    detail: dict[str, Any]
    failed: bool = False  # a call that errored or whose outcome is unknown: drawn red
    wait: bool = False  # the run waited (for a person, a timer, a model account, a child)

    @property
    def classes(self) -> str:
        """The bar's CSS classes: its kind, ``wait`` for a wait and ``failed`` for a
        failure, so that a wait is never drawn as one."""
        return " ".join([self.kind, *(["wait"] if self.wait else []),
                         *(["failed"] if self.failed else [])])


@dataclass(frozen=True, slots=True)
class Waterfall:
    wall_ms: float
    bars: list[Bar]
    hidden: int  # spans beyond MAX_SPANS
    totals: list[tuple[str, float | None]]  # None: the trace has no such figure
    tokens: tuple[int, int]
    cost_micros: int
    sandbox_backend: str | None
    fallbacks: list[dict[str, Any]]
    # Child runs (ADR 0032): the run that started this one, and the runs it started.
    parent_run_id: str | None = None
    children: list[dict[str, Any]] = field(default_factory=list)


def _number(value: Any) -> float:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0.0


def _figure(value: Any) -> float | None:
    return _number(value) if value is not None else None


def _failed(detail: dict[str, Any]) -> bool:
    return detail.get("outcome") in FAILED_OUTCOMES or detail.get("error") is not None


def layout(trace: dict[str, Any]) -> Waterfall:
    spans = [s for s in trace.get("spans") or [] if isinstance(s, dict)]
    ends = [_number(s.get("start_ms")) + _number(s.get("duration_ms")) for s in spans]
    wall = max([_number(trace.get("wall_ms")), *ends, 1.0])
    bars = []
    for span in spans[:MAX_SPANS]:
        start, duration = _number(span.get("start_ms")), _number(span.get("duration_ms"))
        kind = str(span.get("kind", "other"))
        seq = span.get("seq")
        detail = span.get("detail")
        bars.append(Bar(
            kind=kind if kind in KINDS else "other", label=str(span.get("label") or kind),
            seq=seq if isinstance(seq, int) else None, start_ms=start, duration_ms=duration,
            x=round(start / wall * 1000, 2), width=round(max(duration / wall * 1000, 1.0), 2),
            detail=detail if isinstance(detail, dict) else {},
            failed=isinstance(detail, dict) and _failed(detail),
            wait=kind in WAIT_KINDS or (isinstance(detail, dict) and "child_run_id" in detail)))
    totals_in = trace.get("totals") or {}
    sandbox = trace.get("sandbox")
    return Waterfall(
        wall_ms=wall, bars=bars, hidden=max(len(spans) - MAX_SPANS, 0),
        totals=[(name, _figure(totals_in.get(key))) for key, name in TOTALS],
        tokens=(int(_number(totals_in.get("input_tokens"))),
                int(_number(totals_in.get("output_tokens")))),
        cost_micros=int(_number(totals_in.get("cost_micros"))),
        sandbox_backend=str(sandbox.get("backend")) if isinstance(sandbox, dict) else None,
        fallbacks=[f for f in trace.get("fallbacks") or [] if isinstance(f, dict)],
        parent_run_id=parent if isinstance(parent := trace.get("parent_run_id"), str) else None,
        children=[c for c in trace.get("children") or [] if isinstance(c, dict)],
    )
