"""What a process knows about its own work: a small Prometheus registry of counters and
histograms (worker loops fill it, ``/metrics`` renders it) and optional OpenTelemetry spans
per step. Nothing here is created at import time: the app and worker factories build one
:class:`~tenantry.telemetry.worker.WorkerMetrics` per process and pass it down."""
