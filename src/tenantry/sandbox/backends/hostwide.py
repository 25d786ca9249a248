"""Where the sandbox backends keep what every worker process on this host shares: the uid
leases and the sandbox registry. Never under a worker's data dir, so what a dead worker
left is found after its data dir is gone. As root: ``/run/tenantry`` (a tmpfs, cleared at
boot like the processes it describes); otherwise a private folder of this user in the
temp dir (a development host: sandboxes there are this user's alone)."""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from pathlib import Path

from tenantry.sandbox.types import SandboxUnavailable

RUN_DIR = Path("/run/tenantry")


def host_dir(name: str) -> Path:
    """The host-wide folder ``name`` (created, 0700, refused if someone else's)."""
    if os.geteuid() == 0:
        base = RUN_DIR
    else:
        base = Path(tempfile.gettempdir()) / f"tenantry-{os.geteuid()}"
    directory = base / name
    for path in (base, directory):
        with contextlib.suppress(FileExistsError):
            path.mkdir(mode=0o700)
        info = path.lstat()
        # Shared parents (/tmp): refuse a directory (or symlink) someone else planted.
        if (not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid()
                or info.st_mode & 0o022):
            raise SandboxUnavailable(f"{path} is not a private directory of this user; "
                                     "remove it and start again")
    return directory
