"""``tenantry runs trace``: where a run's wall time went, as the API's trace (and the
console's waterfall) has it — one row a span (queue, platform, gateway, model, tool,
approval, parked) with its start and duration, then the run's fallbacks, child runs and the
budget that stopped it, if any; the totals as the table's title."""

from __future__ import annotations

from typing import Any

from tenantry.cli.operator import text
from tenantry.cli.remote import print_json, show_table

HEADER = ["seq", "kind", "start s", "ms", "what", "detail"]


def _title(trace: dict[str, Any]) -> str:
    t = trace["totals"]
    parts = [f"{trace['run_id']} ({trace['agent_id']} v{trace['agent_version']}) "
             f"{trace['status']}: {trace['wall_ms']:.0f} ms"]
    parts += [f"{name} {t[f'{name}_ms']:.0f} ms" for name in (
        "queue", "platform", "gateway", "model", "tool", "approval", "parked")
        if t.get(f"{name}_ms")]
    parts.append(f"tokens {t['input_tokens']}→{t['output_tokens']}, "
                 f"${t['cost_micros'] / 1e6:.4f}")
    return "; ".join(parts)


def _rows(trace: dict[str, Any]) -> list[list[str]]:
    rows = [[str(s["seq"]), s["kind"], f"{s['start_ms'] / 1000:.3f}",
             f"{s['duration_ms']:.0f}", s["label"], text(s["detail"] or None)]
            for s in trace["spans"]]
    rows += [[str(f["seq"]), f["type"], "", "", f"{f['from']} → {f['to']}",
              f["reason"] or "—"] for f in trace["fallbacks"]]
    rows += [[str(c["seq"]), "child run", "", "", f"{c['run_id']} ({c['agent_id']} "
              f"v{c['version']})", c["status"] or "—"] for c in trace.get("children", [])]
    stop = trace.get("stopped")
    if stop:
        rows.append([str(stop["seq"]), "stopped", "", "", stop["limit"],
                     f"{stop['used']} of {stop['max']}"])
    return rows


def print_trace(trace: dict[str, Any], as_json: bool) -> None:
    """The trace as the API answered it (``--json``), else a table of its spans."""
    if as_json:
        print_json(trace)
        return
    show_table(HEADER, _rows(trace), _title(trace))
