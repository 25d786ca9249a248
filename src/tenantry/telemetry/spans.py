"""OpenTelemetry spans per step, only when an exporter is configured.

``TENANTRY_OTEL_EXPORTER`` unset (the default) → :class:`NoSpans`, and OpenTelemetry is never
imported. ``console`` or ``otlp`` → :class:`OtelSpans` over the SDK (the optional ``otel``
extra: ``pip install 'tenantry[otel]'``); ``otlp`` reads the standard ``OTEL_EXPORTER_OTLP_*``
variables for where to send. The worker reports each model call and tool call after it is
saved, with its real start and end times and the run's and tenant's ids as attributes
(ids are fine in traces; only metric labels must stay bounded)."""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import TYPE_CHECKING, Protocol

from tenantry.errors import ConfigurationError

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider

Attributes = Mapping[str, str | int | float | bool]
EXPORTERS = ("console", "otlp")


class StepSpans(Protocol):
    def step(self, name: str, start_ns: int, end_ns: int, attributes: Attributes) -> None:
        """One finished step: ``start_ns``/``end_ns`` are wall-clock nanoseconds."""

    def shutdown(self) -> None:
        """Flush what is buffered."""


class NoSpans:
    """No exporter configured: spans cost nothing."""

    def step(self, name: str, start_ns: int, end_ns: int, attributes: Attributes) -> None:
        return None

    def shutdown(self) -> None:
        return None


class OtelSpans:
    """Spans through an OpenTelemetry SDK ``TracerProvider`` (tests pass one with an
    in-memory exporter)."""

    def __init__(self, provider: TracerProvider) -> None:
        self._provider = provider
        self._tracer = provider.get_tracer("tenantry.worker")

    def step(self, name: str, start_ns: int, end_ns: int, attributes: Attributes) -> None:
        span = self._tracer.start_span(name, start_time=start_ns, attributes=dict(attributes))
        span.end(end_time=max(end_ns, start_ns))

    def shutdown(self) -> None:
        self._provider.shutdown()


def from_exporter(exporter: str | None, *, service: str = "tenantry-worker") -> StepSpans:
    """The spans for ``TENANTRY_OTEL_EXPORTER``: none, console or otlp."""
    if exporter in (None, "", "none"):
        return NoSpans()
    if exporter not in EXPORTERS:
        raise ConfigurationError(f"TENANTRY_OTEL_EXPORTER must be console or otlp, got "
                                 f"{exporter!r}")
    try:
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter
    except ImportError:
        raise ConfigurationError(
            "TENANTRY_OTEL_EXPORTER needs the OpenTelemetry SDK: pip install 'tenantry[otel]'"
        ) from None
    provider = TracerProvider(resource=Resource.create({"service.name": service}))
    if exporter == "console":
        provider.add_span_processor(BatchSpanProcessor(ConsoleSpanExporter()))
    else:
        try:
            otlp = importlib.import_module(
                "opentelemetry.exporter.otlp.proto.http.trace_exporter")
        except ImportError:
            raise ConfigurationError(
                "TENANTRY_OTEL_EXPORTER=otlp needs the OTLP exporter: "
                "pip install 'tenantry[otel]'") from None
        provider.add_span_processor(BatchSpanProcessor(otlp.OTLPSpanExporter()))
    return OtelSpans(provider)
