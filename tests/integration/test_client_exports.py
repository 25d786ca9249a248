"""Exports through the SDK and the CLI (issue 41): asked for with an idempotency key, waited
for while a real exporter writes the archive, listed, read and downloaded whole — the
archive a user opens holds their agent; an export not ready yet is a 404 that leaves no
file; a key without ``data:export`` is refused naming the scope, as one line in the CLI."""

from __future__ import annotations

import asyncio
import io
import os
import tarfile
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tenantry.blobs import Blobs, DirectoryObjects
from tenantry.client import AsyncClient, Client, Export, Forbidden, NotFound, WaitTimeout
from tenantry.db import Database
from tenantry.exports.runner import Exporter
from tests.support.api import Api, serving_api
from tests.support.cli import cli


@pytest.fixture
async def stored_api(database_dsn: str, tmp_path: Path) -> AsyncIterator[Api]:
    """The API with a blob store in the test's data directory (an archive's home)."""
    async with serving_api(database_dsn, data_dir=tmp_path) as served:
        yield served


@pytest.fixture
def exporter(db: Database, tmp_path: Path) -> Exporter:
    """What a worker runs to write queued exports, on the API's store."""
    return Exporter(db, Blobs(db, DirectoryObjects(tmp_path / "blobs")))


def _members(archive: bytes) -> dict[str, bytes]:
    with tarfile.open(fileobj=io.BytesIO(archive), mode="r:gz") as tar:
        return {m.name: tar.extractfile(m).read()  # type: ignore[union-attr]
                for m in tar if m.isfile()}


async def _narrow_key(api: Api, tenant: str) -> str:
    r = await api.client.post(f"/admin/v1/tenants/{tenant}/api-keys", headers=api.operator,
                              json={"scopes": ["runs:read"]})
    assert r.status_code == 201, r.text
    key: str = r.json()["api_key"]
    return key


async def test_an_export_asked_for_waited_on_and_downloaded_through_both_clients(
    stored_api: Api, exporter: Exporter, tmp_path: Path,
) -> None:
    api = stored_api
    tenant, h = await api.tenant()
    agent = await api.agent(h, "exported")
    key = h["Authorization"].removeprefix("Bearer ")
    async with AsyncClient(api.base_url, key) as client:
        asked = await client.exports.create(idempotency_key="december")
        assert isinstance(asked, Export) and (asked.status, asked.ready) == ("queued", False)
        again = await client.exports.create(idempotency_key="december")
        assert again.export_id == asked.export_id  # the same key: the same export
        with pytest.raises(NotFound) as not_ready:
            await client.exports.download(asked.export_id, tmp_path / "early.tar.gz")
        assert "not ready" in not_ready.value.detail
        # No file, not even a partial one.
        assert [n for n in os.listdir(tmp_path) if n.startswith("early")] == []
        with pytest.raises(WaitTimeout) as waited:
            await client.exports.wait(asked.export_id, timeout=0.2, poll_interval=0.05)
        assert waited.value.run.status == "queued"

        # The wait ends when the exporter has written it (no sleep: the exporter's end).
        waiting = asyncio.create_task(client.exports.wait(asked.export_id, timeout=30,
                                                          poll_interval=0.05))
        assert await exporter.run_once() is True
        done = await waiting
        assert done.ready and done.bytes and done.counts and done.counts["agents"] == 1
        assert [e.export_id for e in await client.exports.list()] == [asked.export_id]
        archive = await client.exports.archive(asked.export_id)
        assert len(archive) == done.bytes
        written = await client.exports.download(asked.export_id, tmp_path / "async.tar.gz")
        assert written.read_bytes() == archive
        async with AsyncClient(api.base_url, await _narrow_key(api, tenant)) as narrow:
            with pytest.raises(Forbidden) as refused:
                await narrow.exports.list()
            assert refused.value.extra["scope"] == "data:export"

    members = _members(archive)
    assert next(iter(members)) == "manifest.json"
    assert agent.encode() in members["agents.ndjson"]

    def blocking() -> None:
        with Client(api.base_url, key) as client:
            assert client.exports.get(asked.export_id).ready
            assert client.exports.wait(asked.export_id, timeout=5).ready
            path = client.exports.download(asked.export_id, str(tmp_path / "sync.tar.gz"))
            assert path.read_bytes() == archive
            assert sorted(p.name for p in tmp_path.glob("*.tar.gz*")) == [
                "async.tar.gz", "sync.tar.gz"]
            assert client.exports.archive(asked.export_id) == archive
            page = client.exports.list(limit=1)
            assert [e.export_id for e in page] == [asked.export_id]
            with pytest.raises(NotFound):
                client.exports.get("exp_" + "0" * 32)

    await asyncio.to_thread(blocking)


async def test_the_cli_asks_for_lists_shows_and_downloads_an_export(
    stored_api: Api, exporter: Exporter, tmp_path: Path,
) -> None:
    api = stored_api
    tenant, h = await api.tenant()
    agent = await api.agent(h, "exported")
    env = {"TENANTRY_URL": api.base_url,
           "TENANTRY_API_KEY": h["Authorization"].removeprefix("Bearer ")}
    code, out, err = await cli("exports", "create", "--idempotency-key", "cli-1", env=env)
    assert code == 0, err
    export_id = out.strip()  # alone on stdout: `id=$(tenantry exports create)`
    assert export_id.startswith("exp_") and "queued" in err and "--wait" in err
    code, out, _ = await cli("exports", "create", "--idempotency-key", "cli-1", env=env)
    assert (code, out.strip()) == (0, export_id)
    target = tmp_path / "mine.tar.gz"
    code, out, err = await cli("exports", "download", export_id, "-o", str(target), env=env)
    assert code == 2 and out == "" and "404" in err and "not ready" in err
    assert len(err.strip().splitlines()) == 1 and not target.exists()

    # --wait waits while the exporter writes it, then downloads it whole.
    downloading = asyncio.create_task(cli("exports", "download", export_id, "-o",
                                          str(target), "--wait", env=env))
    assert await exporter.run_once() is True
    code, out, err = await downloading
    assert code == 0, err
    assert out.strip() == f"wrote {target.stat().st_size:,} bytes to {target}"
    assert agent.encode() in _members(target.read_bytes())["agents.ndjson"]

    code, out, err = await cli("exports", "download", export_id, "-o",
                               str(tmp_path / "no-such-dir" / "x.tar.gz"), env=env)
    assert (code, out) == (2, "") and "cannot write" in err and "No such file" in err
    assert len(err.strip().splitlines()) == 1

    code, out, _ = await cli("exports", "list", env=env)
    [header, *rows] = [line.split("\t") for line in out.splitlines()]
    assert code == 0 and header[:3] == ["export_id", "status", "created (UTC)"]
    assert [row[:2] for row in rows] == [[export_id, "ready"]]
    assert rows[0][5] == f"{target.stat().st_size:,} B"
    code, out, _ = await cli("exports", "show", export_id, env=env)
    fields = dict(line.split("\t", 1) for line in out.splitlines()[1:])
    assert code == 0 and fields["status"] == "ready" and fields["count agents"] == "1"
    code, out, _ = await cli("exports", "show", export_id, "--json", env=env)
    assert code == 0 and f'"archive_url": "/v1/exports/{export_id}/archive"' in out

    # A key without data:export: one line naming the scope, nothing made.
    narrow = {**env, "TENANTRY_API_KEY": await _narrow_key(api, tenant)}
    for args in (("exports", "create"), ("exports", "list"), ("exports", "show", export_id)):
        code, out, err = await cli(*args, env=narrow)
        assert (code, out) == (2, ""), args
        assert "403" in err and "data:export" in err and len(err.strip().splitlines()) == 1
    code, out, _ = await cli("exports", "list", env=env)
    assert len(out.splitlines()) == 2  # still the one export
