"""Host uid leases for sandboxes: two allocators (as two worker processes have) over one
folder never hold the same uid at once; a lease a dead holder left is free again."""

from __future__ import annotations

from pathlib import Path

import pytest

from tenantry.sandbox.backends.uids import UidAllocator
from tenantry.sandbox.types import SandboxUnavailable


def test_two_allocators_never_hold_the_same_uid(tmp_path: Path) -> None:
    first, second = (UidAllocator(tmp_path, base=300_000, count=2) for _ in range(2))
    a, b = first.lease(), second.lease()
    assert {a.uid, b.uid} == {300_000, 300_001}
    with pytest.raises(SandboxUnavailable, match="no free sandbox uid"):
        first.lease()
    a.release()
    a.release()  # idempotent
    again = second.lease()
    assert again.uid == a.uid
    b.release()
    again.release()
    assert list(tmp_path.iterdir()) == []


def test_a_lease_file_left_unlocked_is_swept_and_free(tmp_path: Path) -> None:
    (tmp_path / "300000").touch()  # a worker killed -9 holding it: the lock is gone
    allocator = UidAllocator(tmp_path, base=300_000, count=1)
    assert not (tmp_path / "300000").exists()
    assert allocator.lease().uid == 300_000
