"""The commands that run the platform's processes: ``up`` (all of it), ``api``, ``worker``,
``activity-worker`` and ``router``, each over :mod:`tenantry.bootstrap`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from tenantry.cli.common import run, settings
from tenantry.cli.options import (
    ActivitySlots,
    BodySeconds,
    Cell,
    CellConnections,
    Concurrency,
    ConsoleDatabaseUrl,
    ConsoleSecureCookie,
    DatabaseUrl,
    DataDir,
    DelayNewRunsAt,
    DirectoryUrl,
    Host,
    IdleSeconds,
    MaxOperatorRequests,
    MaxQueuedRuns,
    MaxRequestsPerTenant,
    MaxStreamsPerTenant,
    MetricsPort,
    MinBoundary,
    ModelBaseUrl,
    OperatorToken,
    Port,
    Processes,
    RefuseBatchRunsAt,
    Region,
    RouterHost,
    RouterPort,
    SseMaxStreams,
    SseMaxStreamsPerTenant,
    StreamLifetimeSeconds,
    Workers,
)

if TYPE_CHECKING:
    from tenantry.config import Settings


def api(
    database_url: DatabaseUrl = None, data_dir: DataDir = None, host: Host = None,
    port: Port = None, operator_token: OperatorToken = None,
    max_queued_runs: MaxQueuedRuns = None, refuse_batch_runs_at: RefuseBatchRunsAt = None,
    console_database_url: ConsoleDatabaseUrl = None,
    sse_max_streams: SseMaxStreams = None, sse_max_streams_per_tenant: SseMaxStreamsPerTenant
    = None, console_secure_cookie: ConsoleSecureCookie = None,
    cell: Cell = None, region: Region = None,
) -> None:
    """Serve the HTTP API only (the schema must be migrated)."""
    config = settings(database_url=database_url, data_dir=data_dir, host=host, port=port,
                      cell=cell, region=region,
                      console_database_url=console_database_url,
                      operator_token=operator_token, max_queued_runs=max_queued_runs,
                      refuse_batch_runs_at=refuse_batch_runs_at,
                      sse_max_streams=sse_max_streams,
                      sse_max_streams_per_tenant=sse_max_streams_per_tenant,
                      console_secure_cookie=console_secure_cookie)
    _serve(config, migrate=False, demo=False, api=True, workers=0, production=True)


def worker(
    database_url: DatabaseUrl = None, data_dir: DataDir = None,
    concurrency: Concurrency = None, model_base_url: ModelBaseUrl = None,
    metrics_port: MetricsPort = None,
    max_queued_runs: MaxQueuedRuns = None, delay_new_runs_at: DelayNewRunsAt = None,
    sandbox_min_boundary: MinBoundary = None,
    processes: Processes = None,
) -> None:
    """Run a worker: claim queued runs and drive them (the schema must be migrated). It
    refuses to start if its sandbox boundary is below --sandbox-min-boundary."""
    config = settings(database_url=database_url, data_dir=data_dir,
                      worker_concurrency=concurrency, model_base_url=model_base_url,
                      worker_metrics_port=metrics_port, max_queued_runs=max_queued_runs,
                      delay_new_runs_at=delay_new_runs_at,
                      sandbox_min_boundary=sandbox_min_boundary,
                      worker_processes=processes)
    if config.processes == 1:
        _serve(config, migrate=False, demo=False, api=False, workers=1, production=True)
        return
    from tenantry.bootstrap import supervisor

    status = run(lambda: supervisor.supervise(config))
    if status:
        raise typer.Exit(status)


def activity_worker(
    database_url: DatabaseUrl = None, data_dir: DataDir = None,
    slots: ActivitySlots = None,
    sandbox_min_boundary: MinBoundary = None,
    metrics_port: MetricsPort = None,
) -> None:
    """Run the activity dispatcher: claim tenants' activity tasks (each tenant under its
    max_activity_slots) and run each attempt in a fresh sandbox. Refuses to start below
    --sandbox-min-boundary or without the vault's master key."""
    from tenantry.bootstrap import activities

    config = settings(database_url=database_url, data_dir=data_dir,
                      activity_worker_slots=slots,
                      sandbox_min_boundary=sandbox_min_boundary,
                      worker_metrics_port=metrics_port)
    run(lambda: activities.serve(config))


def up(
    demo: Annotated[bool, typer.Option(
        "--demo", help="Create a demo tenant and agent, and an API key kept in the data dir "
                       "across restarts.")]
    = False,
    database_url: DatabaseUrl = None, data_dir: DataDir = None, host: Host = None,
    port: Port = None, operator_token: OperatorToken = None,
    concurrency: Concurrency = None, model_base_url: ModelBaseUrl = None,
    workers: Workers = None,
    max_queued_runs: MaxQueuedRuns = None, refuse_batch_runs_at: RefuseBatchRunsAt = None,
    delay_new_runs_at: DelayNewRunsAt = None, sandbox_min_boundary: MinBoundary = None,
    console_database_url: ConsoleDatabaseUrl = None,
    sse_max_streams: SseMaxStreams = None, sse_max_streams_per_tenant: SseMaxStreamsPerTenant
    = None, console_secure_cookie: ConsoleSecureCookie = None,
    cell: Cell = None, region: Region = None,
) -> None:
    """Run the whole platform: (embedded) Postgres, migrations, the API, a worker and the
    activity dispatcher (development: a sandbox boundary below --sandbox-min-boundary is a
    warning)."""
    config = settings(database_url=database_url, data_dir=data_dir, host=host, port=port,
                      cell=cell, region=region,
                      console_database_url=console_database_url,
                      operator_token=operator_token, worker_concurrency=concurrency,
                      model_base_url=model_base_url, workers=workers,
                      max_queued_runs=max_queued_runs,
                      refuse_batch_runs_at=refuse_batch_runs_at,
                      delay_new_runs_at=delay_new_runs_at,
                      sandbox_min_boundary=sandbox_min_boundary,
                      sse_max_streams=sse_max_streams,
                      sse_max_streams_per_tenant=sse_max_streams_per_tenant,
                      console_secure_cookie=console_secure_cookie)
    _serve(config, migrate=True, demo=demo, api=True, workers=config.workers,
           production=False, activities=True)


def router(
    directory_url: DirectoryUrl = None,
    host: RouterHost = None,
    port: RouterPort = None,
    operator_token: OperatorToken = None,
    cell_connections: CellConnections = None,
    max_requests_per_tenant: MaxRequestsPerTenant = None,
    max_streams_per_tenant: MaxStreamsPerTenant = None,
    max_operator_requests: MaxOperatorRequests = None,
    idle_seconds: IdleSeconds = None,
    body_seconds: BodySeconds = None,
    stream_lifetime_seconds: StreamLifetimeSeconds = None,
) -> None:
    """Serve the tenant router: one base URL in front of several cells. It authenticates
    each API key against the global directory and forwards the request (event streams
    included) to the tenant's home cell; operators create tenants through it in a region.
    No tenant may hold more than its share of the router's connections to a cell."""
    from tenantry.bootstrap import router as router_process

    config = settings(directory_url=directory_url, router_host=host, router_port=port,
                      operator_token=operator_token,
                      router_cell_connections=cell_connections,
                      router_max_requests_per_tenant=max_requests_per_tenant,
                      router_max_streams_per_tenant=max_streams_per_tenant,
                      router_max_operator_requests=max_operator_requests,
                      router_idle_seconds=idle_seconds, router_body_seconds=body_seconds,
                      router_stream_lifetime_seconds=stream_lifetime_seconds)
    run(lambda: router_process.serve(config))


def _serve(config: Settings, *, migrate: bool, demo: bool, api: bool, workers: int,
           production: bool, activities: bool = False) -> None:
    from tenantry.bootstrap import process

    run(lambda: process.serve(config, migrate=migrate, demo=demo, api=api, workers=workers,
                              production=production, activities=activities))
