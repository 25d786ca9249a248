"""``tenantry exports``: exports of everything the tenant has (with a key holding
``data:export``) — asked for, listed, shown and downloaded over the platform's API with
the client SDK. A worker writes each archive (docs/reference/export-format.md); it is kept
7 days.

``create`` prints the export's id alone on standard output (``id=$(tenantry exports
create)``); what to do next goes to standard error.

Exit status: 0 done; 1 an export that failed, or a ``--wait`` that timed out (the status on
standard output, the reason on standard error); 2 bad input, configuration, or an error
answer (one line)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from tenantry.cli.common import fail
from tenantry.cli.help import App
from tenantry.cli.options import DEFAULT_URL, ApiKey, Url
from tenantry.cli.remote import (
    AsJson,
    ended,
    fetch,
    print_fields,
    print_json,
    print_list,
    sdk_client,
)
from tenantry.cli.tool_servers import when

if TYPE_CHECKING:
    from tenantry.client import Client, Export

exports_app = App(help="Exports of everything your tenant has, one archive each: ask for "
                       "one, list, show, download (as a tenant: TENANTRY_API_KEY, with "
                       "data:export).")

ExportId = Annotated[str, typer.Argument(help="The export's id (exp_...).")]
Wait = Annotated[bool, typer.Option("--wait", help="Wait until the export is ready (or has "
                                                   "failed) first.")]
Timeout = Annotated[float, typer.Option(
    min=0, help="With --wait: give up after this many seconds (exit status 1).")]
#: How often --wait reads the export at most: writing one takes seconds to minutes.
WAIT_POLL_SECONDS = 1.0


def size(value: int | None) -> str:
    return "—" if value is None else f"{value:,} B"


def _rows(export: Export) -> list[list[str]]:
    rows = [["export_id", export.export_id], ["status", export.status],
            ["requested by", export.requested_by], ["attempts", str(export.attempts)],
            ["created (UTC)", when(export.created_at)],
            ["started (UTC)", when(export.started_at)],
            ["finished (UTC)", when(export.finished_at)],
            ["expires (UTC)", when(export.expires_at)], ["size", size(export.bytes)]]
    if export.counts:
        rows += [[f"count {name}", str(n)] for name, n in sorted(export.counts.items())]
    if export.error:
        rows.append(["error", export.error])
    return rows


def _waited(client: Client, export_id: str, timeout: float) -> Export:
    """The export once ready; exit status 1 (its status on stdout, why on stderr) when it
    failed or the wait timed out."""
    from tenantry.client import WaitTimeout

    try:
        export = client.exports.wait(export_id, timeout=timeout,
                                     poll_interval=WAIT_POLL_SECONDS)
    except WaitTimeout as exc:
        status = exc.run.status if exc.run is not None else "unknown"
        ended(status, f"timed out after {timeout:g} s; the export is {status}")
    if not export.ready:
        ended(export.status, f"{export_id} failed: {export.error or 'no reason recorded'}")
    return export


@exports_app.command("create")
def create(
    idempotency_key: Annotated[str | None, typer.Option(
        help="Asking again with the same key returns the same export (default: a new "
             "one each time).")] = None,
    wait: Wait = False, timeout: Timeout = 600.0,
    url: Url = DEFAULT_URL, api_key: ApiKey = None, as_json: AsJson = False,
) -> None:
    """Ask for an export of everything your tenant has: runs with their events, traces
    and blobs, tombstones, agents and their versions, test sets, evaluations, usage. Prints
    its id; a worker writes it."""
    try:
        with sdk_client(url, api_key) as client:
            export = client.exports.create(idempotency_key=idempotency_key)
            if wait:
                export = _waited(client, export.export_id, timeout)
    except KeyboardInterrupt:
        raise typer.Exit(130) from None
    if as_json:
        print_json(export.raw)
        return
    typer.echo(export.export_id)
    if not export.ready:
        typer.echo(f"{export.status}; download it once ready: tenantry exports download "
                   f"{export.export_id} --wait", err=True)


@exports_app.command("list")
def list_exports(url: Url = DEFAULT_URL, api_key: ApiKey = None,
                 as_json: AsJson = False) -> None:
    """Your tenant's exports, newest first, until they expire (every page)."""
    print_list(url, api_key, as_json, lambda client: client.exports.list,
               ["export_id", "status", "created (UTC)", "finished (UTC)", "expires (UTC)",
                "size", "requested by"],
               lambda e: [e.export_id, e.status, when(e.created_at), when(e.finished_at),
                          when(e.expires_at), size(e.bytes), e.requested_by])


@exports_app.command("show")
def show(export_id: ExportId, url: Url = DEFAULT_URL, api_key: ApiKey = None,
         as_json: AsJson = False) -> None:
    """One export: its status, dates, size and what its archive holds (once ready), or why
    it failed."""
    print_fields(fetch(url, api_key, lambda client: client.exports.get(export_id)), as_json,
                 _rows)


@exports_app.command("download")
def download(
    export_id: ExportId,
    output: Annotated[Path | None, typer.Option(
        "--output", "-o", help="Where to write the archive (default: <export id>.tar.gz "
                               "here). Written whole or not at all.")] = None,
    wait: Wait = False, timeout: Timeout = 600.0,
    url: Url = DEFAULT_URL, api_key: ApiKey = None,
) -> None:
    """Download an export's archive (a tar.gz). Without --wait, an export not ready yet is
    an error (404)."""
    target = output if output is not None else Path(f"{export_id}.tar.gz")
    try:
        with sdk_client(url, api_key) as client:
            if wait:
                _waited(client, export_id, timeout)
            written = client.exports.download(export_id, target)
    except KeyboardInterrupt:
        raise typer.Exit(130) from None
    except OSError as exc:  # the file, not the platform: a missing directory, no room
        fail(f"cannot write {target}: {exc.strerror or exc}")
    typer.echo(f"wrote {written.stat().st_size:,} bytes to {written}")
