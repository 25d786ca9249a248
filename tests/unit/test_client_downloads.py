"""``exports.download`` without a server: an archive is written whole or not at all — a
connection cut after the answer began raises ConnectionFailed and leaves neither a partial
file nor a changed one where the archive was to go; an answer cut nowhere is the file."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest

from tenantry.client import AsyncClient, Client, ConnectionFailed, NotFound

ARCHIVE = b"\x1f\x8b" + b"x" * 200_000


class _Pieces(httpx2.SyncByteStream, httpx2.AsyncByteStream):
    """The archive in pieces; with ``cut``, the connection fails after the first."""

    def __init__(self, cut: bool) -> None:
        self.cut = cut

    def _pieces(self) -> Iterator[bytes]:
        yield ARCHIVE[:65536]
        if self.cut:
            raise httpx2.RemoteProtocolError("peer closed connection mid-body")
        yield ARCHIVE[65536:]

    def __iter__(self) -> Iterator[bytes]:
        yield from self._pieces()

    async def __aiter__(self) -> Any:
        for piece in self._pieces():
            yield piece


def _platform(*, cut: bool) -> httpx2.MockTransport:
    def handler(request: httpx2.Request) -> httpx2.Response:
        if request.url.path == "/v1/exports/exp_1/archive":
            return httpx2.Response(200, headers={"content-type": "application/gzip"},
                                   stream=_Pieces(cut))
        return httpx2.Response(404, json={"type": "not_found", "title": "Not found",
                                          "status": 404, "detail": "No export."},
                               headers={"content-type": "application/problem+json"})

    return httpx2.MockTransport(handler)


def test_a_cut_download_leaves_the_file_as_it_was(tmp_path: Path) -> None:
    target = tmp_path / "export.tar.gz"
    target.write_bytes(b"last month's")
    with Client("http://platform.test", "tnt_x", transport=_platform(cut=True)) as client:
        with pytest.raises(ConnectionFailed) as failed:
            client.exports.download("exp_1", target)
        assert "exp_1" in str(failed.value)
        with pytest.raises(NotFound):
            client.exports.download("exp_2", tmp_path / "other.tar.gz")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["export.tar.gz"]
    assert target.read_bytes() == b"last month's"
    with Client("http://platform.test", "tnt_x", transport=_platform(cut=False)) as client:
        assert client.exports.download("exp_1", target) == target
    assert target.read_bytes() == ARCHIVE
    assert sorted(p.name for p in tmp_path.iterdir()) == ["export.tar.gz"]


async def test_the_async_client_writes_whole_or_not_at_all_too(tmp_path: Path) -> None:
    target = tmp_path / "export.tar.gz"
    async with AsyncClient("http://platform.test", "tnt_x",
                           transport=_platform(cut=True)) as client:
        with pytest.raises(ConnectionFailed):
            await client.exports.download("exp_1", target)
    assert os.listdir(tmp_path) == []
    async with AsyncClient("http://platform.test", "tnt_x",
                           transport=_platform(cut=False)) as client:
        await client.exports.download("exp_1", str(target))
    assert target.read_bytes() == ARCHIVE
