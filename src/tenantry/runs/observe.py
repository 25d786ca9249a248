"""What a worker reports about each step besides the log: OpenTelemetry spans (when an
exporter is configured) and the per-process metrics. Nothing here is needed to run or
resume a run; the trace API derives the same timings from the log alone."""

from __future__ import annotations

from typing import Any

from tenantry.models.types import ModelReply
from tenantry.telemetry.worker import WorkerMetrics
from tenantry.tools.gateway import ToolResult


def _base(tenant: str, tenant_class: str, run_id: str, seq: int) -> dict[str, Any]:
    return {"tenantry.run_id": run_id, "tenantry.tenant_id": tenant,
            "tenantry.tenant_class": tenant_class, "tenantry.seq": seq}


def model_step(
    metrics: WorkerMetrics, *, tenant: str, tenant_class: str, run_id: str, seq: int,
    reply: ModelReply, cost_micros: int, began_ns: int, ended_ns: int,
) -> None:
    attributes = {
        **_base(tenant, tenant_class, run_id, seq),
        "gen_ai.system": reply.provider, "gen_ai.response.model": reply.model,
        "tenantry.account": reply.account,
        "gen_ai.usage.input_tokens": reply.usage.input_tokens,
        "gen_ai.usage.output_tokens": reply.usage.output_tokens,
        "tenantry.cost_micros": cost_micros,
    }
    metrics.spans.step(f"model {reply.model}", began_ns, ended_ns, attributes)


def tool_step(
    metrics: WorkerMetrics, *, tenant: str, tenant_class: str, run_id: str, seq: int,
    tool: str, key: str, result: ToolResult, began_ns: int, ended_ns: int,
) -> None:
    attributes: dict[str, Any] = {
        **_base(tenant, tenant_class, run_id, seq), "tenantry.tool": tool,
        "tenantry.tool.key": key, "tenantry.tool.outcome": result.outcome,
    }
    if result.server is not None:
        attributes["tenantry.tool.server"] = result.server
    box = result.sandbox or {}
    if box:
        attributes["tenantry.sandbox.backend"] = str(box.get("backend"))
        if "exec_ms" in box:
            attributes["tenantry.sandbox.exec_ms"] = float(box["exec_ms"])
        if "ready_ms" in box:
            # A sandbox was made ready for this call: its claim (or restore) latency.
            metrics.sandbox_claim.observe(float(box["ready_ms"]) / 1000, tenant_class,
                                          str(box.get("backend")),
                                          str(bool(box.get("warm"))).lower())
    metrics.spans.step(f"tool {tool}", began_ns, ended_ns, attributes)
