"""The host-wide sandbox registry and the backstop over it (``guardian``): every sandbox a
backend starts is recorded under ``/run/tenantry/sandboxes`` (``hostwide``) with its
owning worker's pid and start time, its cgroup and its host process. If the worker dies
without destroying it, the worker's guardian kills it at once; if the guardian died too,
the next backend to start on the host does (``Backstop`` runs ``reap`` first)."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import subprocess
import sys
from pathlib import Path

from tenantry.sandbox.backends import guardian
from tenantry.sandbox.backends.hostwide import host_dir
from tenantry.sandbox.types import SandboxUnavailable

logger = logging.getLogger(__name__)

GUARDIAN = Path(guardian.__file__)


class Backstop:
    """One per backend object: registers its sandboxes and keeps a guardian watching the
    worker process. ``close`` stops the guardian (the backend destroyed its sandboxes)."""

    def __init__(self, backend: str, directory: Path | None = None) -> None:
        self.backend = backend
        self.directory = directory if directory is not None else host_dir("sandboxes")
        reaped = guardian.reap(self.directory)
        if reaped:
            logger.warning("killed sandboxes of workers that are gone",
                           extra={"count": reaped, "backend": backend})
        pid = os.getpid()
        started = guardian.start_time(pid)
        assert started is not None  # our own /proc entry
        self.worker = (pid, started)
        # Its own session: a signal to the worker's process group does not reach it. No
        # environment of the worker's: it needs none.
        try:
            self._guardian: subprocess.Popen[bytes] | None = subprocess.Popen(
                [sys.executable, "-I", "-S", str(GUARDIAN), str(self.directory), str(pid),
                 str(started)],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL, start_new_session=True, cwd="/",
                env={"PATH": "/usr/bin:/bin"})
        except OSError as exc:
            raise SandboxUnavailable(f"could not start the sandbox guardian "
                                     f"({sys.executable} {GUARDIAN}): {exc}") from None

    @property
    def guardian_pid(self) -> int | None:
        return self._guardian.pid if self._guardian is not None else None

    def _path(self, instance_id: str) -> Path:
        return self.directory / f"{instance_id}{guardian.SUFFIX}"

    def register(self, instance_id: str, *, cgroups: tuple[str, ...] = (),
                 pids: tuple[int, ...] = ()) -> None:
        """Record a sandbox before (cgroup) or as soon as (pids) it exists."""
        processes = [[pid, started] for pid in pids
                     if (started := guardian.start_time(pid)) is not None]
        record = {"backend": self.backend, "worker_pid": self.worker[0],
                  "worker_start": self.worker[1], "cgroups": list(cgroups),
                  "processes": processes}
        partial = self.directory / f".{instance_id}.partial"
        partial.write_text(json.dumps(record))
        partial.replace(self._path(instance_id))  # never read half-written

    def forget(self, instance_id: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            self._path(instance_id).unlink()

    def close(self) -> None:
        process, self._guardian = self._guardian, None
        if process is not None:
            with contextlib.suppress(ProcessLookupError):
                process.send_signal(signal.SIGKILL)
            process.wait()
