"""The option types of the ``tenantry`` commands, each declared once. An option that sets
a setting takes its flag, variable, help and shown default from the variable's one
declaration (:mod:`tenantry.config.variables`); left unset it defers to ``Settings`` (and so
to the variable), whose default its help shows."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from tenantry.config import default_text, variable


def option(env: str) -> Any:
    """The option that sets ``env``, as its declaration says."""
    declared = variable(env)
    if declared.flag is None or declared.help is None:
        raise ValueError(f"{env} is declared without a flag")
    shown = default_text(declared)
    return typer.Option(declared.flag, envvar=env, help=declared.help,
                        show_default=True if shown.startswith("unset")
                        else shown.replace("`", ""))


# The cell's processes, where they listen and their database.
DatabaseUrl = Annotated[str | None, option("TENANTRY_DATABASE_URL")]
ConsoleDatabaseUrl = Annotated[str | None, option("TENANTRY_CONSOLE_DATABASE_URL")]
DataDir = Annotated[Path | None, option("TENANTRY_DATA_DIR")]
Host = Annotated[str | None, option("TENANTRY_HOST")]
Port = Annotated[int | None, option("TENANTRY_PORT")]
OperatorToken = Annotated[str | None, option("TENANTRY_OPERATOR_TOKEN")]
Cell = Annotated[str | None, option("TENANTRY_CELL")]
Region = Annotated[str | None, option("TENANTRY_REGION")]
SseMaxStreams = Annotated[int | None, option("TENANTRY_SSE_MAX_STREAMS")]
SseMaxStreamsPerTenant = Annotated[int | None, option("TENANTRY_SSE_MAX_STREAMS_PER_TENANT")]
ConsoleSecureCookie = Annotated[str | None, option("TENANTRY_CONSOLE_SECURE_COOKIE")]
MetricsPort = Annotated[int | None, option("TENANTRY_WORKER_METRICS_PORT")]

# The workers: the model, shedding levels (ADR 0008), loops, processes, the sandbox floor.
ModelBaseUrl = Annotated[str | None, option("TENANTRY_MODEL_BASE_URL")]
Concurrency = Annotated[int | None, option("TENANTRY_WORKER_CONCURRENCY")]
MaxQueuedRuns = Annotated[int | None, option("TENANTRY_MAX_QUEUED_RUNS")]
RefuseBatchRunsAt = Annotated[int | None, option("TENANTRY_REFUSE_BATCH_RUNS_AT")]
DelayNewRunsAt = Annotated[int | None, option("TENANTRY_DELAY_NEW_RUNS_AT")]
Workers = Annotated[int | None, option("TENANTRY_WORKERS")]
Processes = Annotated[int | None, option("TENANTRY_WORKER_PROCESSES")]
ActivitySlots = Annotated[int | None, option("TENANTRY_ACTIVITY_WORKER_SLOTS")]
MinBoundary = Annotated[str | None, option("TENANTRY_SANDBOX_MIN_BOUNDARY")]
ImageDir = Annotated[Path | None, option("TENANTRY_SANDBOX_IMAGE_DIR")]
NewMasterKey = Annotated[str, option("TENANTRY_NEW_MASTER_KEY")]

# The router and its global directory; the cells it knows.
DirectoryUrl = Annotated[str | None, option("TENANTRY_DIRECTORY_URL")]
RouterHost = Annotated[str | None, option("TENANTRY_ROUTER_HOST")]
RouterPort = Annotated[int | None, option("TENANTRY_ROUTER_PORT")]
CellConnections = Annotated[int | None, option("TENANTRY_ROUTER_CELL_CONNECTIONS")]
MaxRequestsPerTenant = Annotated[int | None, option("TENANTRY_ROUTER_MAX_REQUESTS_PER_TENANT")]
MaxStreamsPerTenant = Annotated[int | None, option("TENANTRY_ROUTER_MAX_STREAMS_PER_TENANT")]
MaxOperatorRequests = Annotated[int | None, option("TENANTRY_ROUTER_MAX_OPERATOR_REQUESTS")]
IdleSeconds = Annotated[int | None, option("TENANTRY_ROUTER_IDLE_SECONDS")]
BodySeconds = Annotated[int | None, option("TENANTRY_ROUTER_BODY_SECONDS")]
StreamLifetimeSeconds = Annotated[int | None, option("TENANTRY_ROUTER_STREAM_LIFETIME_SECONDS")]
CellOperatorToken = Annotated[str, option("TENANTRY_CELL_OPERATOR_TOKEN")]
CellDatabaseUrl = Annotated[str | None, option("TENANTRY_CELL_DATABASE_URL")]

# Backups (pgBackRest).
Stanza = Annotated[str, option("TENANTRY_BACKUP_STANZA")]
BackupConfig = Annotated[Path | None, option("TENANTRY_BACKUP_CONFIG")]

# The commands that talk to a running platform over its API.
Url = Annotated[str, option("TENANTRY_URL")]
ApiKey = Annotated[str | None, option("TENANTRY_API_KEY")]
AdminKey = Annotated[str | None, option("TENANTRY_PROVIDER_ADMIN_KEY")]
DEFAULT_URL = "http://127.0.0.1:8080"
# Acting on one tenant as the operator (tenantry.cli.operator).
OnTenant = Annotated[str | None, typer.Option(
    "--tenant", metavar="TENANT_ID", show_default=False,
    help="Act on this tenant as the operator (TENANTRY_OPERATOR_TOKEN) instead of as a "
         "tenant (TENANTRY_API_KEY).")]
