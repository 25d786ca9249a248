"""A tenant's bytes in the blob store have a quota (issue 15, item 4): a tenant writing
past it is refused — nothing written, a typed error saying how full it is — while another
tenant's writes still succeed, and deleting blobs gives the room back."""

from __future__ import annotations

from pathlib import Path

import pytest

from tenantry.blobs import BlobQuotaExceeded, DirectoryBlobStore
from tenantry.ids import TenantId

QUOTA = 10_000


def tenant() -> TenantId:
    return TenantId.new()


async def test_a_tenant_writing_past_its_quota_is_refused_and_another_still_writes(
    tmp_path: Path,
) -> None:
    store = DirectoryBlobStore(tmp_path / "blobs", quota_bytes=QUOTA)
    hoarder, bystander = tenant(), tenant()
    kept = [await store.put(hoarder, f"fill-{i}", bytes([i]) * 3000) for i in range(3)]
    with pytest.raises(BlobQuotaExceeded) as refused:
        await store.put(hoarder, "one-more", b"x" * 3000)
    assert "quota reached" in refused.value.detail and "nothing was written" in \
        refused.value.detail
    assert refused.value.extra == {"used_bytes": 9000, "quota_bytes": QUOTA,
                                   "needed_bytes": 3000}
    assert sorted(p.name for p in (tmp_path / "blobs" / hoarder.value).iterdir()) == \
        sorted(kept)  # the refused write left nothing, not even a temporary file
    # Another tenant's quota is its own.
    ref = await store.put(bystander, "report", b"y" * 9000)
    assert await store.get(bystander, ref) == b"y" * 9000
    # The same blob written again is counted once; deleting one gives its bytes back.
    assert await store.put(hoarder, "fill-0", bytes([0]) * 3000) == kept[0]
    await store.delete(hoarder, kept[0])
    assert store.usage(hoarder) == 6000
    await store.put(hoarder, "one-more", b"x" * 3000)


async def test_no_quota_means_none(tmp_path: Path) -> None:
    store = DirectoryBlobStore(tmp_path / "blobs")
    await store.put(tenant(), "big", b"z" * (QUOTA * 3))
