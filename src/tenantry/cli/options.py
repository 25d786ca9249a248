"""The option types more than one command takes, each declared once."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from tenantry.config import Settings

# Options left unset defer to Settings (and so to its environment variables): their help
# shows the default Settings would take.
DEFAULTS = Settings()

DatabaseUrl = Annotated[
    str | None,
    typer.Option("--database-url", envvar="TENANTRY_DATABASE_URL",
                 help="External Postgres; unset runs the embedded one in the data dir."),
]
ConsoleDatabaseUrl = Annotated[
    str | None,
    typer.Option("--console-database-url", envvar="TENANTRY_CONSOLE_DATABASE_URL",
                 help="The operator's login (tenantry_console_login), for the console's "
                      "cross-tenant reads and a tenant's erase (only it may shred the "
                      "tenant's secrets); unset: the embedded one's, or --database-url."),
]
DataDir = Annotated[
    Path | None,
    typer.Option("--data-dir", envvar="TENANTRY_DATA_DIR",
                 help="Embedded Postgres, blob store, sandbox images.",
                 show_default="$XDG_DATA_HOME/tenantry or ~/.local/share/tenantry"),
]
Host = Annotated[str | None, typer.Option(
    "--host", envvar="TENANTRY_HOST", show_default=DEFAULTS.host,
    help="Address the API and the console listen on (0.0.0.0: every interface).")]
Port = Annotated[int | None, typer.Option(
    "--port", envvar="TENANTRY_PORT", show_default=str(DEFAULTS.port),
    help="Port the API and the console listen on.")]
OperatorToken = Annotated[
    str | None,
    typer.Option("--operator-token", envvar="TENANTRY_OPERATOR_TOKEN",
                 help="The operator credential for /admin/v1; `up` and `api` generate and "
                      "print one when unset."),
]
Cell = Annotated[str | None, typer.Option(
    "--cell", envvar="TENANTRY_CELL", show_default=DEFAULTS.cell,
    help="This cell's name: each tenant it creates has it as home_cell.")]
Region = Annotated[str | None, typer.Option(
    "--region", envvar="TENANTRY_REGION", show_default=DEFAULTS.region,
    help="The region this cell serves; `default` hosts tenants of any region.")]
ModelBaseUrl = Annotated[
    str | None,
    typer.Option("--model-base-url", envvar="TENANTRY_MODEL_BASE_URL",
                 help="OpenAI-compatible endpoint; unset uses the built-in scripted model."),
]
Concurrency = Annotated[
    int | None,
    typer.Option("--concurrency", envvar="TENANTRY_WORKER_CONCURRENCY",
                 help="Runs one worker process holds at once.",
                 show_default=str(DEFAULTS.worker_concurrency)),
]
# Shedding levels (ADR 0008), in runs queued in the whole cell.
MaxQueuedRuns = Annotated[
    int | None,
    typer.Option("--max-queued-runs", envvar="TENANTRY_MAX_QUEUED_RUNS",
                 help="From this many queued runs every new run is refused (503).",
                 show_default=str(DEFAULTS.max_queued_runs)),
]
RefuseBatchRunsAt = Annotated[
    int | None,
    typer.Option("--refuse-batch-runs-at", envvar="TENANTRY_REFUSE_BATCH_RUNS_AT",
                 help="From this many queued runs new batch runs are refused (503); "
                      "default 80% of --max-queued-runs."),
]
DelayNewRunsAt = Annotated[
    int | None,
    typer.Option("--delay-new-runs-at", envvar="TENANTRY_DELAY_NEW_RUNS_AT",
                 help="From this many queued runs in-flight runs of every tenant are "
                      "claimed before new runs; default 50% of --max-queued-runs."),
]
MinBoundary = Annotated[
    str | None,
    typer.Option("--sandbox-min-boundary", envvar="TENANTRY_SANDBOX_MIN_BOUNDARY",
                 help="Weakest sandbox boundary a worker starts with: microvm, gvisor "
                      "or bwrap; `worker` refuses below it, `up` warns.",
                 show_default=DEFAULTS.sandbox_min_boundary),
]
SseMaxStreams = Annotated[
    int | None,
    typer.Option("--sse-max-streams", envvar="TENANTRY_SSE_MAX_STREAMS",
                 help="Open event streams this process serves; past it 429.",
                 show_default=str(DEFAULTS.sse_max_streams)),
]
SseMaxStreamsPerTenant = Annotated[
    int | None,
    typer.Option("--sse-max-streams-per-tenant", envvar="TENANTRY_SSE_MAX_STREAMS_PER_TENANT",
                 help="Open event streams per tenant in this process; past it 429.",
                 show_default=str(DEFAULTS.sse_max_streams_per_tenant)),
]
ConsoleSecureCookie = Annotated[
    str | None,
    typer.Option("--console-secure-cookie", envvar="TENANTRY_CONSOLE_SECURE_COOKIE",
                 help="auto (Secure over https), true (always: behind a TLS proxy) or false.",
                 show_default=DEFAULTS.console_secure_cookie),
]
MetricsPort = Annotated[int | None, typer.Option(
    "--metrics-port", envvar="TENANTRY_WORKER_METRICS_PORT",
    help="Serve this process's /metrics (operator token) on this port; off by default.")]
DirectoryUrl = Annotated[
    str | None,
    typer.Option("--directory-url", envvar="TENANTRY_DIRECTORY_URL",
                 help="The global directory's Postgres database (its schema brought current "
                      "first)."),
]
Url = Annotated[str, typer.Option("--url", envvar="TENANTRY_URL",
                                  help="The platform's API base URL.")]
ApiKey = Annotated[str | None, typer.Option("--api-key", envvar="TENANTRY_API_KEY",
                                            help="A tenant API key.")]
DEFAULT_URL = "http://127.0.0.1:8080"
