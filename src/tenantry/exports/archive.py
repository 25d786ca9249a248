"""Writing one tenant's export archive (format: docs/reference/export-format.md).

Everything is read in the tenant's transactions (row-level security checks every row), in
pages, and written as it is read: newline-delimited JSON files and blob files in a work
directory, then one ``tar.gz`` with ``manifest.json`` first. Memory holds one page of rows
(or one run's events for its trace, a 1 MiB piece of a blob) at a time; the disk holds the
files and the archive. ``keep`` is called between pages and runs: it renews the export's
lease and raises once the lease is lost, so a stale writer stops early (its archive would
not be taken anyway); it is cheap to call often (the runner renews only once a third of the
lease has passed)."""

from __future__ import annotations

import asyncio
import contextlib
import io
import logging
import tarfile
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

import asyncpg
import orjson

from tenantry.backoff import backoff
from tenantry.blobs import BlobNotFound, BlobStoreUnavailable, ObjectStore, object_key
from tenantry.db import DATABASE_DOWN, Database
from tenantry.db.queries import load
from tenantry.ids import AgentId, EvaluationId, ExportId, RunId, TenantId, TestSetId
from tenantry.runs import log
from tenantry.runs.trace import build_trace

Q = load(__package__)
logger = logging.getLogger(__name__)

FORMAT = "tenantry-export"
FORMAT_VERSION = 1
#: Rows per page of every table, and events per page of a run's log.
PAGE = 200
EVENT_PAGE = 500
#: How long a blob's copy waits for an object store that does not answer.
STORE_PATIENCE_SECONDS = 120.0
#: The archive's files, in the order the tar holds them (after manifest.json).
FILES = ("runs.ndjson", "events.ndjson", "traces.ndjson", "blobs.ndjson",
         "tombstones.ndjson", "agents.ndjson", "agent_versions.ndjson", "test_sets.ndjson",
         "evaluations.ndjson", "usage.ndjson")
#: Before every uuid: where each keyset walk starts.
_ZERO = uuid.UUID(int=0)

Keep = Callable[[], Awaitable[None]]
#: What a trace's failure may not be mistaken for a bug of the trace's: the database's.
_DATABASE_ERRORS: tuple[type[Exception], ...] = (asyncpg.PostgresError, *DATABASE_DOWN)


@dataclass(slots=True)
class Written:
    """What an archive holds: lines per file, blob files and their bytes, its size."""

    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(FILES, 0))
    blob_files: int = 0
    blob_bytes: int = 0
    blobs_missing: int = 0
    #: Runs whose log gave no trace (a bug of the trace's, said in the operator's log).
    traces_failed: int = 0
    archive_bytes: int = 0

    def summary(self) -> dict[str, int]:
        return {**{name.removesuffix(".ndjson"): n for name, n in self.counts.items()},
                "blob_files": self.blob_files, "blob_bytes": self.blob_bytes,
                "blobs_missing": self.blobs_missing, "traces_failed": self.traces_failed}


def _line(value: Any) -> bytes:
    return orjson.dumps(value, option=orjson.OPT_APPEND_NEWLINE)


def _id(kind: type[RunId] | type[AgentId] | type[TestSetId] | type[EvaluationId],
        value: Any) -> str | None:
    return None if value is None else str(kind(value))


class _Files:
    """The work directory's open NDJSON files; each page is written in a thread."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.handles: dict[str, IO[bytes]] = {}

    def open(self) -> None:
        (self.root / "blobs").mkdir(parents=True, exist_ok=True)
        for name in FILES:
            self.handles[name] = (self.root / name).open("wb")

    async def write(self, written: Written, name: str, lines: Sequence[bytes]) -> None:
        if lines:
            await asyncio.to_thread(self.handles[name].write, b"".join(lines))
            written.counts[name] += len(lines)

    def close(self) -> None:
        for handle in self.handles.values():
            handle.close()


async def write_archive(db: Database, objects: ObjectStore, tenant: TenantId, export: ExportId,
                        requested_at: datetime, work: Path, keep: Keep) -> tuple[Path, Written]:
    """The tenant's archive, written under ``work`` (an empty directory the caller removes);
    returns its path and what it holds."""
    files = _Files(work / "files")
    written = Written()
    await asyncio.to_thread(files.open)
    try:
        await _runs(db, objects, tenant, files, written, keep)
        await _simple(db, tenant, files, written, keep)
    finally:
        await asyncio.to_thread(files.close)
    manifest = {
        "format": FORMAT, "format_version": FORMAT_VERSION, "tenant_id": tenant.value,
        "export_id": str(export), "requested_at": requested_at,
        "created_at": datetime.now(UTC), "counts": written.summary(),
        "files": {name: {"lines": written.counts[name]} for name in FILES},
    }
    archive = work / "archive.tar.gz"
    await asyncio.to_thread(_tar, files.root, archive, _line(manifest), FILES)
    written.archive_bytes = archive.stat().st_size
    return archive, written


def _tar(root: Path, archive: Path, manifest: bytes, names: Sequence[str]) -> None:
    """manifest.json first (a reader learns the format before anything else), then the
    files in their fixed order, then the blobs by ref."""
    mtime = datetime.now(UTC).timestamp()
    with tarfile.open(archive, "w:gz", format=tarfile.PAX_FORMAT) as tar:
        info = tarfile.TarInfo("manifest.json")
        info.size, info.mtime, info.mode = len(manifest), mtime, 0o644
        tar.addfile(info, io.BytesIO(manifest))
        for name in names:
            tar.add(root / name, arcname=name, recursive=False)
        for blob in sorted((root / "blobs").iterdir()):
            tar.add(blob, arcname=f"blobs/{blob.name}", recursive=False)


async def _runs(db: Database, objects: ObjectStore, tenant: TenantId, files: _Files,
                written: Written, keep: Keep) -> None:
    """Every run now in the log (any status), its events in seq order with spilled payloads
    joined back, its trace, its blobs; then the tombstones of deleted runs."""
    async for page in _pages(db, tenant, Q.runs, keep, lambda r: (r["run_id"],), (_ZERO,)):
        for run in page:
            await keep()
            await _one_run(db, objects, tenant, run, files, written)
    async for page in _pages(db, tenant, Q.tombstones, keep, lambda r: (r["run_id"],),
                             (_ZERO,)):
        await files.write(written, "tombstones.ndjson", [_line({
            **dict(stone), "run_id": _id(RunId, stone["run_id"]),
            "agent_id": _id(AgentId, stone["agent_id"]),
            "parent_run_id": _id(RunId, stone["parent_run_id"])}) for stone in page])


async def _one_run(db: Database, objects: ObjectStore, tenant: TenantId, run: Any, files: _Files,
                   written: Written) -> None:
    """One run's line, its events page by page, its trace and its blobs."""
    run_id = RunId(run["run_id"])
    await files.write(written, "runs.ndjson", [_line(_run(run_id, run))])
    after = 0
    while True:
        async with db.tenant_tx(tenant) as conn:
            events = await log.read(conn, tenant, run_id, after=after, limit=EVENT_PAGE)
        await files.write(written, "events.ndjson", [_line({
            "run_id": str(run_id), "seq": e.seq, "type": e.type, "format": e.format,
            "created_at": e.created_at, "data": e.data}) for e in events])
        if len(events) < EVENT_PAGE:
            break
        after = events[-1].seq
    async with db.tenant_tx(tenant) as conn:
        stored = await conn.fetch(Q.run_blobs, tenant.value, run_id.uuid)
        try:
            trace = await build_trace(conn, tenant, run_id)
        except _DATABASE_ERRORS:
            raise  # the database's: the attempt fails and is tried again
        except Exception:  # derived, not data: the run's events are in the archive anyway
            logger.exception("no trace for an exported run", extra={
                "tenant": tenant.value, "run_id": str(run_id)})
            trace = {"run_id": str(run_id), "error": "no trace could be derived"}
            written.traces_failed += 1
    if trace is not None:  # None: deleted since its row was read
        await files.write(written, "traces.ndjson", [_line(trace)])
    for blob in stored:
        await _blob(objects, tenant, run_id, blob, files, written)


def _run(run_id: RunId, row: Any) -> dict[str, Any]:
    return {**dict(row), "run_id": str(run_id), "agent_id": _id(AgentId, row["agent_id"]),
            "parent_run_id": _id(RunId, row["parent_run_id"])}


async def _blob(objects: ObjectStore, tenant: TenantId, run: RunId, row: Any, files: _Files,
                written: Written) -> None:
    ref: str = row["ref"]
    size = await _copy_blob(objects, object_key(tenant, ref), files.root / "blobs" / ref)
    if size is not None:
        written.blob_files += 1
        written.blob_bytes += size
    else:
        written.blobs_missing += 1
    await files.write(written, "blobs.ndjson", [_line({
        "run_id": str(run), "ref": ref, "kind": row["kind"], "bytes": row["bytes"],
        "created_at": row["created_at"],
        "path": f"blobs/{ref}" if size is not None else None})])


async def _copy_blob(objects: ObjectStore, key: str, target: Path) -> int | None:
    """The object's bytes into ``target``, piece by piece (a 64 MiB sandbox save is never
    in memory whole); its size, or None when the store holds nothing under ``key`` (its
    registry row without its object: never finished, or going). A store that does not
    answer is waited for, as a worker's blob reads are (ADR 0042), then fails the attempt."""
    deadline = time.monotonic() + STORE_PATIENCE_SECONDS
    tries = 0
    while True:
        out = await asyncio.to_thread(target.open, "wb")
        try:
            size = 0
            async with contextlib.aclosing(objects.chunks(key)) as pieces:
                async for piece in pieces:
                    await asyncio.to_thread(out.write, piece)
                    size += len(piece)
            return size
        except BlobNotFound:
            await asyncio.to_thread(target.unlink, True)
            return None
        except BlobStoreUnavailable:
            tries += 1
            wait = backoff(tries, first=0.5, cap=5.0)
            if time.monotonic() + wait > deadline:
                raise
            await asyncio.sleep(wait)
        finally:
            await asyncio.to_thread(out.close)


async def _simple(db: Database, tenant: TenantId, files: _Files, written: Written,
                  keep: Keep) -> None:
    """Agents and versions, test sets, evaluations, usage: rows as they are, ids in their
    API forms."""
    async for page in _pages(db, tenant, Q.agents, keep, lambda r: (r["agent_id"],),
                             (_ZERO,)):
        await files.write(written, "agents.ndjson", [_line({
            **dict(r), "agent_id": _id(AgentId, r["agent_id"])}) for r in page])
    async for page in _pages(db, tenant, Q.agent_versions, keep,
                             lambda r: (r["agent_id"], r["version"]), (_ZERO, 0)):
        await files.write(written, "agent_versions.ndjson", [_line({
            **dict(r), "agent_id": _id(AgentId, r["agent_id"])}) for r in page])
    async for page in _pages(db, tenant, Q.test_sets, keep, lambda r: (r["test_set_id"],),
                             (_ZERO,)):
        await files.write(written, "test_sets.ndjson", [_line({
            **dict(r), "test_set_id": _id(TestSetId, r["test_set_id"]),
            "agent_id": _id(AgentId, r["agent_id"])}) for r in page])
    async for page in _pages(db, tenant, Q.evaluations, keep,
                             lambda r: (r["evaluation_id"],), (_ZERO,)):
        await files.write(written, "evaluations.ndjson", [_line({
            **dict(r), "evaluation_id": _id(EvaluationId, r["evaluation_id"]),
            "agent_id": _id(AgentId, r["agent_id"]),
            "test_set_id": _id(TestSetId, r["test_set_id"])}) for r in page])
    for kind, query in (("model", Q.usage_facts), ("sandbox", Q.sandbox_usage_facts)):
        async for page in _pages(db, tenant, query, keep, lambda r: (r["run_id"], r["seq"]),
                                 (_ZERO, 0)):
            await files.write(written, "usage.ndjson", [_line({
                "kind": kind, **dict(r), "run_id": _id(RunId, r["run_id"]),
                "agent_id": _id(AgentId, r["agent_id"])}) for r in page])


async def _pages(db: Database, tenant: TenantId, query: str, keep: Keep,
                 key: Callable[[Any], tuple[Any, ...]], start: tuple[Any, ...],
                 ) -> AsyncIterator[list[Any]]:
    """Every row of ``query``, in keyset pages of :data:`PAGE` after ``start``, each read in
    a tenant transaction of its own (no long transaction holds back vacuum), the lease
    renewed before each."""
    after = start
    while True:
        await keep()
        async with db.tenant_tx(tenant) as conn:
            rows = await conn.fetch(query, tenant.value, *after, PAGE)
        if rows:
            yield rows
        if len(rows) < PAGE:
            return
        after = key(rows[-1])
