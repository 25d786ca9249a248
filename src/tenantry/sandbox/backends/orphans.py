"""What a worker killed -9 leaves on the host, and who removes it.

Each worker process keeps its sandboxes' host folders under ``proc-<its pid>``; a backend
starting on the host removes the folders of processes that no longer exist (after the
backend-specific ``cleanup``, e.g. deleting gVisor containers that outlived their worker).
A live process's folder is never touched, whoever it belongs to. A clean shutdown removes
its own folder (:func:`release_process_dir`), so the next start has nothing to reap."""

from __future__ import annotations

import logging
import os
import shutil
from collections.abc import Callable
from pathlib import Path

logger = logging.getLogger(__name__)

PREFIX = "proc-"

# This process's folders and how many backends hold each: in `tenantry up` the worker's
# sandbox manager and the activity dispatcher share one, and the last to close removes it.
# Process-wide by nature (the folder is named after the process).
_holders: dict[Path, int] = {}


def process_dir(parent: Path, *, mode: int = 0o700) -> Path:
    """This process's folder under ``parent`` (created)."""
    parent.mkdir(parents=True, exist_ok=True)
    home = parent / f"{PREFIX}{os.getpid()}"
    home.mkdir(mode=mode, exist_ok=True)
    home.chmod(mode)
    _holders[home] = _holders.get(home, 0) + 1
    return home


def release_process_dir(home: Path) -> None:
    """A backend that closed cleanly gives up ``home`` (from :func:`process_dir`); the last
    holder removes it — what is left in it belonged to sandboxes already destroyed."""
    left = _holders.get(home, 0) - 1
    if left > 0:
        _holders[home] = left
        return
    _holders.pop(home, None)
    shutil.rmtree(home, ignore_errors=True)


def reap_dead(parent: Path, cleanup: Callable[[Path], None] | None = None) -> int:
    """Remove the folders of processes that are gone; returns how many."""
    reaped = 0
    for home in parent.glob(f"{PREFIX}*") if parent.is_dir() else ():
        try:
            pid = int(home.name.removeprefix(PREFIX))
            os.kill(pid, 0)
            continue  # alive: ours or another worker's
        except ValueError:
            continue
        except ProcessLookupError:
            pass
        except PermissionError:
            continue  # exists, as another user
        if cleanup is not None:
            cleanup(home)
        shutil.rmtree(home, ignore_errors=True)
        reaped += 1
        logger.warning("removed what a worker that is gone left behind",
                       extra={"pid": pid, "path": str(home)})
    return reaped
