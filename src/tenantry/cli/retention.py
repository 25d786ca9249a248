"""``tenantry retention``: one cleaner pass (``run``), a tenant's policy (``policy``), or a
tenant's erase carried to its end (``erase``), with rich progress on stderr and a summary
on stdout (ADR 0017).

Exit codes: 0 done; 1 a tenant's pass was cut short (another cleaner took its lease; run
again); 2 nothing could be done (a bad tenant id, an unknown tenant, no database)."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from tenantry.cli.common import run as run_refusing
from tenantry.cli.common import settings
from tenantry.cli.help import App
from tenantry.cli.options import ConsoleDatabaseUrl, DatabaseUrl, DataDir

retention_app = App(help="Retention: delete ended runs past their tenant's policy, or erase "
                             "a tenant.")

Batch = Annotated[int, typer.Option("--batch", min=1, max=10_000,
                                    help="Runs deleted per transaction.")]


@retention_app.command("run")
def run(
    tenant: Annotated[str | None, typer.Option(
        "--tenant", help="Only this tenant, due or not (default: every tenant due).")] = None,
    batch: Batch = 500, database_url: DatabaseUrl = None, data_dir: DataDir = None,
) -> None:
    """Run one cleaner pass now.

    Each tenant's ended runs past its retention are deleted (a tombstone remains), then
    its expired tombstones and audit rows, then the deleted runs' blobs."""
    from rich.console import Console

    from tenantry.bootstrap import retention
    from tenantry.retention.cleaner import PassResult

    config = settings(database_url=database_url, data_dir=data_dir)
    err = Console(stderr=True)
    with err.status("retention pass") as status:
        def show(result: PassResult) -> None:
            status.update(f"{result.tenant}: {result.runs} runs, {result.events} events "
                          f"deleted ({result.batches} batches)")

        results = run_refusing(lambda: retention.run_pass(config, tenant, batch, show))
    for r in results:
        err.log(f"{r.tenant}: {r.reason}: {r.runs} runs, {r.events} events, "
                f"{r.blobs_queued} blobs, {r.tombstones_expired} tombstones and "
                f"{r.audit_expired} audit rows expired in {r.seconds:.1f} s"
                + (" (lease lost: run again)" if r.lease_lost else ""))
    typer.echo(f"{len(results)} tenant(s): {sum(r.runs for r in results)} runs, "
               f"{sum(r.events for r in results)} events, "
               f"{sum(r.blobs_queued for r in results)} blobs deleted; "
               f"{sum(r.tombstones_expired for r in results)} tombstones expired")
    if tenant is not None and not results:
        typer.secho("error: another cleaner holds this tenant now; run again later",
                    fg="red", err=True)
        raise typer.Exit(1)
    if any(r.lease_lost for r in results):
        raise typer.Exit(1)


@retention_app.command("policy")
def policy(
    tenant: Annotated[str, typer.Argument(help="The tenant whose policy to show.")],
    database_url: DatabaseUrl = None, data_dir: DataDir = None,
) -> None:
    """Show a tenant's retention policy (set it with PUT /admin/v1/tenants/{id}/retention
    and /audit-retention)."""
    from tenantry.bootstrap import retention

    config = settings(database_url=database_url, data_dir=data_dir)
    p = run_refusing(lambda: retention.show_policy(config, tenant))

    def days(value: int | None) -> str:
        return "forever" if value is None else f"{value} days"

    since = p.updated_at.isoformat() if p.updated_at else "never (the defaults)"
    typer.echo(f"runs kept:         {days(p.runs_days)} after they end\n"
               f"tombstones kept:   {days(p.tombstones_days)}\n"
               f"audit kept:        {days(p.audit_days)}\n"
               f"blobs follow runs: {'yes' if p.blobs_follow_runs else 'no'}\n"
               f"set:               {since}")


@retention_app.command("erase")
def erase(
    tenant: Annotated[str, typer.Argument(help="The tenant to erase.")],
    yes: Annotated[bool, typer.Option("--yes", help="Do not ask for confirmation.")] = False,
    batch: Batch = 500, database_url: DatabaseUrl = None,
    console_database_url: ConsoleDatabaseUrl = None, data_dir: DataDir = None,
) -> None:
    """Erase a tenant and wait until its runs are gone.

    It admits nothing more, its keys are revoked, its secrets, data key and tool servers
    are deleted at once, its live runs cancelled; then every run is deleted (tombstones
    stay, per their policy). A running run is deleted once its worker has stopped it.
    Safe to run again: it joins the erase under way."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    from tenantry.bootstrap import retention
    from tenantry.retention.erase import EraseJob

    if not yes:
        typer.confirm(f"Erase tenant {tenant!r}? This cannot be undone", abort=True)
    config = settings(database_url=database_url, data_dir=data_dir,
                         console_database_url=console_database_url)
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                  transient=False) as bar:
        task = bar.add_task(f"erasing {tenant}", total=None)

        def show(update: Any) -> None:
            if isinstance(update, EraseJob):
                waiting = (f" (waiting for {update.runs_left} running run(s) to stop)"
                           if update.status == "running" and update.runs_left else "")
                bar.update(task, total=update.runs_total,
                           completed=update.runs_total - update.runs_left,
                           description=f"erasing {tenant}{waiting}")

        job = run_refusing(lambda: retention.erase_tenant(config, tenant, batch, show))
    typer.echo(f"erased {tenant}: {job.runs_deleted} runs deleted ({job.runs_cancelled} "
               f"cancelled first), {job.secrets_deleted} secrets and "
               f"{job.tool_servers_deleted} tool servers deleted, {job.blobs_queued} blobs; "
               f"job {job.job_id}")
