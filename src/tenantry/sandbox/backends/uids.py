"""Host uids for sandboxes, leased host-wide: one lock file per uid under a host-wide
folder, held (flock) while the sandbox lives. Two worker processes on one host, each with
its own backend, never hand two sandboxes the same uid; a dead worker's leases end with
it (the kernel drops its locks), and its sandboxes are killed by the backstop."""

from __future__ import annotations

import contextlib
import fcntl
import os
import secrets
from dataclasses import dataclass, field
from pathlib import Path

from tenantry.sandbox.backends.hostwide import host_dir
from tenantry.sandbox.types import SandboxUnavailable

#: Unprivileged, outside any range a distribution allocates (Debian stops at 59999 for
#: users and uses 65534 for nobody; systemd's dynamic users are 61184-65519).
HOST_UID_BASE = 200_000
HOST_UID_COUNT = 60_000
#: Random picks before giving up: a host with thousands of sandboxes still finds one.
ATTEMPTS = 256


@dataclass(slots=True)
class UidLease:
    uid: int
    path: Path
    fd: int = field(repr=False)

    def release(self) -> None:
        """Idempotent. The file goes while still locked, so nobody can lock it after us
        and be unlinked from under (``lease`` checks the inode it locked is the path's)."""
        if self.fd < 0:
            return
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()
        os.close(self.fd)
        self.fd = -1


class UidAllocator:
    def __init__(self, directory: Path | None = None, *, base: int = HOST_UID_BASE,
                 count: int = HOST_UID_COUNT) -> None:
        self.directory = directory if directory is not None else host_dir("uids")
        self.base = base
        self.count = count
        self.sweep()

    def sweep(self) -> int:
        """Remove the lease files of workers that died holding them (their locks went with
        them; the files stay). Safe against a concurrent ``lease``: it re-checks that the
        file it locked is still the one at the path. Returns how many went."""
        removed = 0
        for path in self.directory.iterdir():
            if not path.name.isdigit():
                continue
            lease = self._try(int(path.name))
            if lease is not None:
                lease.release()
                removed += 1
        return removed

    def lease(self) -> UidLease:
        for _ in range(ATTEMPTS):
            uid = self.base + secrets.randbelow(self.count)
            lease = self._try(uid)
            if lease is not None:
                return lease
        raise SandboxUnavailable(f"no free sandbox uid in {self.base}.."
                                 f"{self.base + self.count - 1} after {ATTEMPTS} tries "
                                 f"(leases in {self.directory})")

    def _try(self, uid: int) -> UidLease | None:
        path = self.directory / str(uid)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return None  # held by a live sandbox, of this worker or another
        try:
            same = os.stat(path).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            same = False
        if not same:  # its holder released it between our open and our lock
            os.close(fd)
            return None
        return UidLease(uid, path, fd)
