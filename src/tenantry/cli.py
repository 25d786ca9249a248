"""The ``tenantry`` command: parses flags and calls :mod:`tenantry.bootstrap` (or
``cli_client``/``cli_billing``) to do the work. Heavy libraries are imported inside
commands so that ``tenantry --help`` stays fast."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn, TypeVar

import typer

from tenantry import __version__
from tenantry.cli_help import App
from tenantry.config import Settings

if TYPE_CHECKING:
    from rich.progress import TaskID

    from tenantry.runs.replay import RecordedRun

T = TypeVar("T")

if __name__ == "__main__":
    # `python -m tenantry.cli`: run the package's own copy of this module. This copy would
    # register the sub-commands, whose modules import `tenantry.cli` by name — a second,
    # half-made copy — and fail on the circle.
    from tenantry.cli import main as _main

    _main()
    raise SystemExit(0)

app = App(
    name="tenantry",
    help="Run AI agents for other companies: durable runs, fair scheduling, tenant isolation.",
    add_completion=False,
)

# Options left unset defer to Settings (and so to its environment variables): their help
# shows the default Settings would take.
_DEFAULT = Settings()

DatabaseUrl = Annotated[
    str | None,
    typer.Option("--database-url", envvar="TENANTRY_DATABASE_URL",
                 help="External Postgres; unset runs the embedded one in the data dir."),
]
ConsoleDatabaseUrl = Annotated[
    str | None,
    typer.Option("--console-database-url", envvar="TENANTRY_CONSOLE_DATABASE_URL",
                 help="Login for the console's cross-tenant reads (tenantry_console_login); "
                      "unset: the embedded one's, or --database-url."),
]
DataDir = Annotated[
    Path | None,
    typer.Option("--data-dir", envvar="TENANTRY_DATA_DIR",
                 help="Embedded Postgres, blob store, sandbox images.",
                 show_default="$XDG_DATA_HOME/tenantry or ~/.local/share/tenantry"),
]
Host = Annotated[str | None, typer.Option(
    "--host", envvar="TENANTRY_HOST", show_default=_DEFAULT.host,
    help="Address the API and the console listen on (0.0.0.0: every interface).")]
Port = Annotated[int | None, typer.Option(
    "--port", envvar="TENANTRY_PORT", show_default=str(_DEFAULT.port),
    help="Port the API and the console listen on.")]
OperatorToken = Annotated[
    str | None,
    typer.Option("--operator-token", envvar="TENANTRY_OPERATOR_TOKEN",
                 help="Operator credential for /admin/v1; generated and printed when unset."),
]

Cell = Annotated[str | None, typer.Option(
    "--cell", envvar="TENANTRY_CELL", show_default=_DEFAULT.cell,
    help="This cell's name: each tenant it creates has it as home_cell.")]
Region = Annotated[str | None, typer.Option(
    "--region", envvar="TENANTRY_REGION", show_default=_DEFAULT.region,
    help="The region this cell serves; `default` hosts tenants of any region.")]


def _settings(**overrides: Any) -> Settings:
    from tenantry.config import Settings
    from tenantry.errors import ConfigurationError

    try:
        return Settings.from_env(**overrides)
    except ConfigurationError as exc:
        typer.secho(f"error: {exc.detail}", fg="red", err=True)
        raise typer.Exit(2) from None


@app.command()
def version() -> None:
    """Print the Tenantry version."""
    typer.echo(__version__)


@app.command("migrate")
def migrate_cmd(
    database_url: DatabaseUrl = None, data_dir: DataDir = None,
    status: Annotated[bool, typer.Option(
        "--status", help="Change nothing: print the code's release, the releases connected, "
                         "what is pending and whether applying it (or a contract step) is "
                         "safe now.")] = False,
    contract: Annotated[bool, typer.Option(
        "--contract", help="Apply the contract steps (removals of what an older release "
                           "uses); refused while a process of an older release is "
                           "connected.")] = False,
) -> None:
    """Apply pending database migrations, then the routines that changed (the embedded
    database when no URL is given); refused while a process of a release the new schema
    does not serve is connected (docs/how-to/upgrade.md)."""
    from tenantry.bootstrap import commands

    if status and contract:
        _fail("--status and --contract: one or the other")
    settings = _settings(database_url=database_url, data_dir=data_dir)
    if status:
        for line in _run(lambda: commands.migrate_status(settings)).lines():
            typer.echo(line)
        return
    if contract:
        steps = _run(lambda: commands.contract(settings))
        typer.echo(f"applied {len(steps)} contract step(s)" if steps
                   else "no contract step due")
        return
    applied = _run(lambda: commands.migrate(settings))
    typer.echo(f"applied {len(applied.migrations)} migration(s) and "
               f"{len(applied.routines)} routine(s); schema is current")
    if applied.contract:  # a database migrated from empty: nothing older was connected
        typer.echo(f"applied {len(applied.contract)} contract step(s) (a new database)")
    if applied.contract_due:
        typer.echo(f"{len(applied.contract_due)} contract step(s) due: run 'tenantry migrate "
                   "--contract' once no process of an older release is connected "
                   "('tenantry migrate --status' says)")


ModelBaseUrl = Annotated[
    str | None,
    typer.Option("--model-base-url", envvar="TENANTRY_MODEL_BASE_URL",
                 help="OpenAI-compatible endpoint; unset uses the built-in scripted model."),
]
Concurrency = Annotated[
    int | None,
    typer.Option("--concurrency", envvar="TENANTRY_WORKER_CONCURRENCY",
                 help="Runs one worker process holds at once.",
                 show_default=str(_DEFAULT.worker_concurrency)),
]
# Shedding levels (ADR 0008), in runs queued in the whole cell.
MaxQueuedRuns = Annotated[
    int | None,
    typer.Option("--max-queued-runs", envvar="TENANTRY_MAX_QUEUED_RUNS",
                 help="From this many queued runs every new run is refused (503).",
                 show_default=str(_DEFAULT.max_queued_runs)),
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
                 show_default=_DEFAULT.sandbox_min_boundary),
]
SseMaxStreams = Annotated[
    int | None,
    typer.Option("--sse-max-streams", envvar="TENANTRY_SSE_MAX_STREAMS",
                 help="Open event streams this process serves; past it 429.",
                 show_default=str(_DEFAULT.sse_max_streams)),
]
SseMaxStreamsPerTenant = Annotated[
    int | None,
    typer.Option("--sse-max-streams-per-tenant", envvar="TENANTRY_SSE_MAX_STREAMS_PER_TENANT",
                 help="Open event streams per tenant in this process; past it 429.",
                 show_default=str(_DEFAULT.sse_max_streams_per_tenant)),
]
ConsoleSecureCookie = Annotated[
    str | None,
    typer.Option("--console-secure-cookie", envvar="TENANTRY_CONSOLE_SECURE_COOKIE",
                 help="auto (Secure over https), true (always: behind a TLS proxy) or false.",
                 show_default=_DEFAULT.console_secure_cookie),
]


@app.command()
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
    settings = _settings(database_url=database_url, data_dir=data_dir, host=host, port=port,
                         cell=cell, region=region,
                         console_database_url=console_database_url,
                         operator_token=operator_token, max_queued_runs=max_queued_runs,
                         refuse_batch_runs_at=refuse_batch_runs_at,
                         sse_max_streams=sse_max_streams,
                         sse_max_streams_per_tenant=sse_max_streams_per_tenant,
                         console_secure_cookie=console_secure_cookie)
    _serve(settings, migrate=False, demo=False, api=True, workers=0, production=True)


@app.command()
def worker(
    database_url: DatabaseUrl = None, data_dir: DataDir = None,
    concurrency: Concurrency = None, model_base_url: ModelBaseUrl = None,
    metrics_port: Annotated[int | None, typer.Option(
        "--metrics-port", envvar="TENANTRY_WORKER_METRICS_PORT",
        help="Serve this worker's /metrics (operator token) on this port; off by default.",
    )] = None,
    max_queued_runs: MaxQueuedRuns = None, delay_new_runs_at: DelayNewRunsAt = None,
    sandbox_min_boundary: MinBoundary = None,
    processes: Annotated[int | None, typer.Option(
        "--processes", envvar="TENANTRY_WORKER_PROCESSES", min=1,
        help="Worker processes on this host, each its own event loop and --concurrency, "
             "under a supervisor that restarts one that dies; 1: this process alone.",
        show_default="one per CPU")] = None,
) -> None:
    """Run a worker: claim queued runs and drive them (the schema must be migrated). It
    refuses to start if its sandbox boundary is below --sandbox-min-boundary."""
    settings = _settings(database_url=database_url, data_dir=data_dir,
                         worker_concurrency=concurrency, model_base_url=model_base_url,
                         worker_metrics_port=metrics_port, max_queued_runs=max_queued_runs,
                         delay_new_runs_at=delay_new_runs_at,
                         sandbox_min_boundary=sandbox_min_boundary,
                         worker_processes=processes)
    if settings.processes == 1:
        _serve(settings, migrate=False, demo=False, api=False, workers=1, production=True)
        return
    from tenantry.bootstrap import supervisor

    status = _run(lambda: supervisor.supervise(settings))
    if status:
        raise typer.Exit(status)


@app.command("activity-worker")
def activity_worker(
    database_url: DatabaseUrl = None, data_dir: DataDir = None,
    slots: Annotated[int | None, typer.Option(
        "--slots", envvar="TENANTRY_ACTIVITY_WORKER_SLOTS",
        help="Activity attempts this process runs at once, one fresh sandbox each.",
        show_default=str(_DEFAULT.activity_worker_slots),
    )] = None,
    sandbox_min_boundary: MinBoundary = None,
    metrics_port: Annotated[int | None, typer.Option(
        "--metrics-port", envvar="TENANTRY_WORKER_METRICS_PORT",
        help="Serve this dispatcher's /metrics (operator token) on this port; off by default.",
    )] = None,
) -> None:
    """Run the activity dispatcher: claim tenants' activity tasks (each tenant under its
    max_activity_slots) and run each attempt in a fresh sandbox. Refuses to start below
    --sandbox-min-boundary or without the vault's master key."""
    from tenantry.bootstrap import activities

    settings = _settings(database_url=database_url, data_dir=data_dir,
                         activity_worker_slots=slots,
                         sandbox_min_boundary=sandbox_min_boundary,
                         worker_metrics_port=metrics_port)
    _run(lambda: activities.serve(settings))


@app.command()
def up(
    demo: Annotated[bool, typer.Option("--demo", help="Create a demo tenant, key and agent.")]
    = False,
    database_url: DatabaseUrl = None, data_dir: DataDir = None, host: Host = None,
    port: Port = None, operator_token: OperatorToken = None,
    concurrency: Concurrency = None, model_base_url: ModelBaseUrl = None,
    workers: Annotated[int | None, typer.Option(
        "--workers", envvar="TENANTRY_WORKERS", help="Worker loops in this process.",
        show_default=str(_DEFAULT.workers))] = None,
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
    settings = _settings(database_url=database_url, data_dir=data_dir, host=host, port=port,
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
    _serve(settings, migrate=True, demo=demo, api=True, workers=settings.workers,
           production=False, activities=True)


@app.command()
def router(
    directory_url: Annotated[str | None, typer.Option(
        "--directory-url", envvar="TENANTRY_DIRECTORY_URL",
        help="The global directory's Postgres database (migrated at start).")] = None,
    host: Annotated[str | None, typer.Option(
        "--host", envvar="TENANTRY_ROUTER_HOST", show_default=_DEFAULT.router_host,
        help="Address the router listens on.")] = None,
    port: Annotated[int | None, typer.Option(
        "--port", envvar="TENANTRY_ROUTER_PORT", show_default=str(_DEFAULT.router_port),
        help="Port the router listens on.")] = None,
    operator_token: Annotated[str | None, typer.Option(
        "--operator-token", envvar="TENANTRY_OPERATOR_TOKEN",
        help="Operator credential for the router's /admin/v1 (required).")] = None,
    cell_connections: Annotated[int | None, typer.Option(
        "--cell-connections", envvar="TENANTRY_ROUTER_CELL_CONNECTIONS", min=2,
        show_default=str(_DEFAULT.router_cell_connections),
        help="Connections the router opens to each cell at most (one per request in "
             "flight; more wait for one). The caps below default to shares of it.")] = None,
    max_requests_per_tenant: Annotated[int | None, typer.Option(
        "--max-requests-per-tenant", envvar="TENANTRY_ROUTER_MAX_REQUESTS_PER_TENANT",
        min=2, show_default="a tenth of --cell-connections (100)",
        help="Requests of one tenant in flight through the router at once, event streams "
             "included; one more answers 429 overloaded.")] = None,
    max_streams_per_tenant: Annotated[int | None, typer.Option(
        "--max-streams-per-tenant", envvar="TENANTRY_ROUTER_MAX_STREAMS_PER_TENANT", min=1,
        show_default="half of --max-requests-per-tenant (50)",
        help="Event streams of one tenant open through the router at once (fewer than "
             "--max-requests-per-tenant); one more answers 429 overloaded.")] = None,
    max_operator_requests: Annotated[int | None, typer.Option(
        "--max-operator-requests", envvar="TENANTRY_ROUTER_MAX_OPERATOR_REQUESTS", min=1,
        show_default="a twentieth of --cell-connections (50)",
        help="Operator calls in flight to each cell at once; one more answers 429.")] = None,
    idle_seconds: Annotated[int | None, typer.Option(
        "--idle-seconds", envvar="TENANTRY_ROUTER_IDLE_SECONDS", min=1,
        show_default=f"{_DEFAULT.router_idle_seconds:g}",
        help="A forwarded answer ends when the cell sends nothing, or the caller takes "
             "nothing, for this long (above the cells' 15 s stream keepalive).")] = None,
    body_seconds: Annotated[int | None, typer.Option(
        "--body-seconds", envvar="TENANTRY_ROUTER_BODY_SECONDS", min=1,
        show_default=f"{_DEFAULT.router_body_seconds:g}",
        help="An answer other than an event stream is cut unless whole this long after "
             "its head.")] = None,
    stream_lifetime_seconds: Annotated[int | None, typer.Option(
        "--stream-lifetime-seconds", envvar="TENANTRY_ROUTER_STREAM_LIFETIME_SECONDS",
        min=1, show_default=f"{_DEFAULT.router_stream_lifetime_seconds:g}",
        help="An event stream is ended cleanly, between two events, after this long; "
             "clients resume it with Last-Event-ID.")] = None,
) -> None:
    """Serve the tenant router: one base URL in front of several cells. It authenticates
    each API key against the global directory and forwards the request (event streams
    included) to the tenant's home cell; operators create tenants through it in a region.
    No tenant may hold more than its share of the router's connections to a cell."""
    from tenantry.bootstrap import router as router_process

    settings = _settings(directory_url=directory_url, router_host=host, router_port=port,
                         operator_token=operator_token,
                         router_cell_connections=cell_connections,
                         router_max_requests_per_tenant=max_requests_per_tenant,
                         router_max_streams_per_tenant=max_streams_per_tenant,
                         router_max_operator_requests=max_operator_requests,
                         router_idle_seconds=idle_seconds, router_body_seconds=body_seconds,
                         router_stream_lifetime_seconds=stream_lifetime_seconds)
    _run(lambda: router_process.serve(settings))


def _serve(settings: Settings, *, migrate: bool, demo: bool, api: bool, workers: int,
           production: bool, activities: bool = False) -> None:
    from tenantry.bootstrap import process

    _run(lambda: process.serve(settings, migrate=migrate, demo=demo, api=api, workers=workers,
                               production=production, activities=activities))


@app.command()
def replay(
    paths: Annotated[list[Path] | None, typer.Argument(
        help="Recorded runs (JSON files, or folders of them) to replay.")] = None,
    tenant: Annotated[str | None, typer.Option(
        "--tenant", help="Replay this tenant's ended runs from the database instead.")] = None,
    run: Annotated[list[str] | None, typer.Option(
        "--run", help="With --tenant: only these runs.")] = None,
    export: Annotated[Path | None, typer.Option(
        "--export", help="With --tenant: write the runs as recorded-run files into this "
                         "folder (a replay corpus) instead of replaying them.")] = None,
    database_url: DatabaseUrl = None, data_dir: DataDir = None,
) -> None:
    """Re-drive recorded runs through the current code; report every decision that differs.

    Exits 1 when any run differs (so it can gate a deploy or a CI job), 2 when it cannot
    replay at all (no runs, unreadable files, unknown run, unreachable database)."""
    from tenantry.runs.replay import RecordedRun

    if tenant is None and not paths:
        _fail("give recorded-run files or folders, or --tenant to read from the database")
    records: list[tuple[str, RecordedRun]] = []
    for path in paths or []:
        files = sorted(path.glob("*.json")) if path.is_dir() else [path]
        for file in files:
            try:
                records.append((str(file), RecordedRun.load(file)))
            except (OSError, ValueError, KeyError) as exc:
                _fail(f"{file}: not a recorded run: {exc}")
    if tenant is not None:
        from tenantry.bootstrap import commands
        from tenantry.db import DATABASE_DOWN

        settings = _settings(database_url=database_url, data_dir=data_dir)
        try:
            records += _run(lambda: commands.recorded_runs(settings, tenant, run or []))
        except DATABASE_DOWN as exc:
            _fail(f"cannot reach the database: {exc}")
    if not records:
        _fail("no recorded runs found (an empty folder, or a tenant with no ended runs)")
    if export is not None:
        export.mkdir(parents=True, exist_ok=True)
        import orjson

        for _, record in records:
            (export / f"{record.run_id}.json").write_bytes(
                orjson.dumps(record.to_json(), option=orjson.OPT_INDENT_2) + b"\n")
        typer.echo(f"exported {len(records)} run(s) to {export}")
        return
    _report_replay(records)


def _report_replay(records: list[tuple[str, RecordedRun]]) -> None:
    from tenantry.runs.replay import replay as replay_run

    differing = 0
    for source, record in records:
        differences = replay_run(record)
        if differences:
            differing += 1
            typer.secho(f"DIFF {source}", fg="red")
            for difference in differences:
                typer.echo(f"  {difference}")
        else:
            typer.echo(f"ok   {source} ({len(record.events)} events)")
    typer.echo(f"{len(records)} run(s) replayed, {differing} with differences")
    if differing:
        raise typer.Exit(1)


vault_app = App(help="The secrets vault.")
app.add_typer(vault_app, name="vault")


@vault_app.command("rotate-master-key")
def rotate_master_key_cmd(
    new_key: Annotated[str, typer.Option(
        "--new-key", envvar="TENANTRY_NEW_MASTER_KEY",
        help="The new master key (base64, 32 bytes).")],
    database_url: DatabaseUrl = None, data_dir: DataDir = None,
) -> None:
    """Re-wrap every tenant's data key under a new master key (secrets are not re-encrypted).

    The current key comes from TENANTRY_MASTER_KEY (or the data dir's dev key). Safe to run
    again after an interruption. Afterwards, start the platform with the new key."""
    from tenantry.bootstrap import commands

    settings = _settings(database_url=database_url, data_dir=data_dir)
    rotation = _run(lambda: commands.rotate_master_key(settings, new_key))
    if rotation.dev_key_replaced:
        typer.echo("updated the development key in the data dir")
    typer.echo(f"re-wrapped {rotation.rewrapped} tenant key(s) under master key "
               f"{rotation.key_id}")


def _client_commands() -> None:
    from tenantry.cli_backup import backup_app
    from tenantry.cli_billing import billing_app, reconcile
    from tenantry.cli_cells import cells_app
    from tenantry.cli_client import runs_app, usage
    from tenantry.cli_evaluations import agents_app, evaluations_app
    from tenantry.cli_retention import retention_app

    app.add_typer(runs_app, name="runs")
    app.add_typer(evaluations_app, name="evaluations")
    app.add_typer(agents_app, name="agents")
    app.command("usage")(usage)
    billing_app.command("reconcile")(reconcile)
    app.add_typer(billing_app, name="billing")
    app.add_typer(retention_app, name="retention")
    app.add_typer(cells_app, name="cells")
    app.add_typer(backup_app, name="backup")


_client_commands()

sandbox_app = App(help="Sandboxes for model-written code.")
app.add_typer(sandbox_app, name="sandbox")


@sandbox_app.command("build-image")
def sandbox_build_image(
    data_dir: DataDir = None,
    image_dir: Annotated[Path | None, typer.Option(
        "--image-dir", envvar="TENANTRY_SANDBOX_IMAGE_DIR",
        help="Where guest images are kept (default: <data dir>/sandbox).")] = None,
    variant: Annotated[str, typer.Option(
        "--variant", help="Which image: code (code execution), browser (code execution "
        "and a headless Chromium), or all.")] = "all",
) -> None:
    """Build the microVM guest images (kernel + root file system) from Debian packages: the
    code image, and the browser image (the same plus Debian's chromium-headless-shell).

    Reproducible and cached: a no-op when the image for these package versions and this
    guest agent exists. Only this step downloads (through apt); sandboxes never do."""
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from tenantry.sandbox.image import build_image
    from tenantry.sandbox.image.build import VARIANTS
    from tenantry.sandbox.types import SandboxError

    if variant not in (*VARIANTS, "all"):
        _fail(f"--variant must be one of {', '.join(VARIANTS)} or all, got {variant!r}")
    settings = _settings(data_dir=data_dir, sandbox_image_dir=image_dir)
    built = []
    with Progress(TextColumn("{task.description}"), BarColumn(), TimeElapsedColumn(),
                  transient=False) as bar:
        for name in VARIANTS if variant == "all" else (variant,):
            task = bar.add_task(f"{name} image", total=1.0)

            def show(step: str, done: float, task: TaskID = task, name: str = name) -> None:
                bar.update(task, description=f"{name} image: {step}", completed=done)

            try:
                built.append((name, build_image(settings.sandbox_dir, progress=show,
                                                variant=name)))
            except SandboxError as exc:
                _fail(exc.detail)
            bar.update(task, description=f"{name} image ready", completed=1.0)
    for name, image in built:
        typer.echo(f"{name} image {image.digest[:16]}: {image.kernel} + {image.initramfs}")


@sandbox_app.command("probe")
def sandbox_probe(data_dir: DataDir = None, min_boundary: MinBoundary = None) -> None:
    """Which sandbox backends work on this host, the boundary a worker would get (with what
    it runs without here) and whether it meets the minimum."""
    from tenantry.sandbox.backends.microvm import kvm_usable
    from tenantry.sandbox.probe import CONFINEMENT, boundary

    settings = _settings(data_dir=data_dir, sandbox_min_boundary=min_boundary)
    found = boundary(settings)
    for name in ("microvm", "gvisor", "bwrap"):
        reason = found.why_not.get(name)
        mark = "ok " if reason is None else "no "
        extra = ""
        if name == "microvm" and reason is None:
            extra = " (-accel kvm)" if kvm_usable() else " (software CPU emulation: no usable KVM)"
        if name == "bwrap" and reason is None:
            extra = " (development only: shares the host kernel)"
        typer.echo(f"{mark} {name}{extra}{'' if reason is None else ': ' + reason}")
    how = "configured" if found.configured else "probed"
    typer.echo(f"boundary in force: {found.label} ({how})")
    if found.backend is not None:
        typer.echo(f"confinement: {CONFINEMENT[found.backend]}")
        typer.echo("degradations: " + (", ".join(found.degradations) or "none"))
    minimum = settings.sandbox_min_boundary
    if found.weaker_than(minimum):
        typer.echo(f"minimum TENANTRY_SANDBOX_MIN_BOUNDARY={minimum}: NOT met; `tenantry "
                   "worker` refuses to start, `tenantry up` starts with a warning")
    else:
        typer.echo(f"minimum TENANTRY_SANDBOX_MIN_BOUNDARY={minimum}: met")


def _fail(message: str) -> NoReturn:
    typer.secho(f"error: {message}", fg="red", err=True)
    raise typer.Exit(2)


def _run(command: Callable[[], T]) -> T:
    """``command``'s result; a refusal from it (a platform error) is its one line, exit 2."""
    from tenantry.errors import TenantryError

    try:
        return command()
    except TenantryError as exc:
        _fail(exc.detail)


def main() -> None:
    app()
