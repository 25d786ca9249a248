"""``tenantry worker --processes N``: N worker processes on this host, each its own event
loop, pools and worker id, under one small supervisor (docs/decisions/0020).

The supervisor checks once what every worker would refuse on (the sandbox boundary, the
database and its schema), so a refusal is still one line and exit 2; then it starts the
children (``python -m tenantry.bootstrap.worker_child``, settings on their stdin) and:

- restarts a child that exits, after a backoff that doubles per quick exit (0.5 s up to
  30 s) and starts over once a child has stayed up for a while;
- forwards SIGTERM/SIGINT to every child (as SIGTERM), which drain and hand their runs
  back as a lone worker does, and exits 0 once they have (SIGKILL it to stop at once);
- dies with its children: each child is SIGKILLed by the kernel when the supervisor dies
  (``PR_SET_PDEATHSIG``), so a SIGKILL of the ``tenantry worker`` pid still takes the
  whole worker down, as it does with one process.

It runs no event loop: it waits for signals (a child's exit is SIGCHLD) with
``sigtimedwait``, so nothing in it competes with the children for the CPU."""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import dataclasses
import logging
import os
import signal
import subprocess
import sys
import time
import typing
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from tenantry import logs
from tenantry.backoff import backoff
from tenantry.bootstrap import StartupFailed
from tenantry.bootstrap.database import require_current_schema, resolve_database
from tenantry.bootstrap.secrets import operator_token
from tenantry.config import Settings
from tenantry.db import DATABASE_DOWN
from tenantry.db.reach import describe_failure
from tenantry.jsonutil import dumps
from tenantry.sandbox import probe as sandbox_probe

logger = logging.getLogger(__name__)

CHILD_MODULE = "tenantry.bootstrap.worker_child"
#: A child that exits sooner than this after its start counts as a quick exit: the next
#: restart waits twice as long. One that stayed up this long starts the backoff over.
STABLE_SECONDS = 30.0
FIRST_BACKOFF_SECONDS = 0.5
MAX_BACKOFF_SECONDS = 30.0
_SIGNALS = {signal.SIGCHLD, signal.SIGTERM, signal.SIGINT}
_PR_SET_PDEATHSIG = 1


def backoff_seconds(quick_exits: int) -> float:
    """The wait before restarting a child that exited quickly ``quick_exits`` times in a
    row (the first restart after a long life waits the least)."""
    return backoff(quick_exits, first=FIRST_BACKOFF_SECONDS, cap=MAX_BACKOFF_SECONDS,
                   jitter=False)


# ------------------------------------------------------------------ settings to the child


def _path_fields() -> frozenset[str]:
    hints = typing.get_type_hints(Settings)
    return frozenset(name for name, hint in hints.items()
                     if hint is Path or Path in typing.get_args(hint))


def encode_settings(settings: Settings) -> bytes:
    """``settings`` as the JSON a child reads on its stdin (every field, resolved: a
    child reads no flags and no environment of its own)."""
    return dumps({f.name: str(v) if isinstance(v := getattr(settings, f.name), Path) else v
                  for f in dataclasses.fields(Settings)})


def decode_settings(data: bytes) -> Settings:
    paths = _path_fields()
    # JSON has no tuples: the list settings (model_no_stream) come back as tuples.
    values: dict[str, Any] = {k: Path(v) if k in paths and v is not None
                              else tuple(v) if isinstance(v, list) else v
                              for k, v in orjson.loads(data).items()}
    settings = Settings(**values)
    settings.validate()
    return settings


# ----------------------------------------------------------------------------- children


@dataclass(slots=True)
class _Slot:
    index: int
    settings: Settings
    process: subprocess.Popen[bytes] | None = None
    started: float = 0.0
    quick_exits: int = 0
    restart_at: float | None = None  # monotonic; set while it waits to be restarted
    restarts: int = 0
    clean: bool = True  # its last exit was 0, or our own SIGTERM's while stopping


def _die_with_parent(parent: int, mask: set[int | signal.Signals]) -> Callable[[], None]:
    """Runs in the child between fork and exec: the signal mask the supervisor had before
    it blocked its own signals, and SIGKILL when the supervisor dies. (A supervisor that
    died before the prctl took effect is caught by the parent pid check.)"""
    libc = ctypes.CDLL(None, use_errno=True)

    def setup() -> None:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        if libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL) != 0 or os.getppid() != parent:
            os._exit(70)

    return setup


class Supervisor:
    def __init__(self, settings: Settings, processes: int) -> None:
        port = settings.worker_metrics_port
        # Each child serves its own /metrics: the first on --metrics-port, the next on the
        # port after it, and so on.
        self._slots = [_Slot(i, settings.with_(
            worker_processes=1, worker_metrics_port=None if port is None else port + i))
                       for i in range(processes)]
        self._stopping = False
        self._mask: set[int | signal.Signals] = set()

    def run(self) -> int:
        """Until a signal stops it and every child has exited: 0 if they all exited
        cleanly, else 1."""
        self._mask = signal.pthread_sigmask(signal.SIG_BLOCK, _SIGNALS)
        try:
            for slot in self._slots:
                self._start(slot)
            while any(s.process is not None or (s.restart_at is not None and not self._stopping)
                      for s in self._slots):
                info = self._wait(self._next_restart())
                if info is not None and info.si_signo in (signal.SIGTERM, signal.SIGINT):
                    self._stop()
                self._reap()
                self._restart_due()
        finally:
            for slot in self._slots:  # only after an error of our own: leave no child
                if slot.process is not None and slot.process.poll() is None:
                    slot.process.kill()
                    slot.process.wait()
            # A second SIGTERM still pending (a tool that signals the process group and
            # its leader) must not kill us on the way out: taken, then the mask restored.
            while signal.sigtimedwait(_SIGNALS, 0) is not None:
                pass
            signal.pthread_sigmask(signal.SIG_SETMASK, self._mask)
        return 0 if all(s.clean for s in self._slots) else 1

    def _wait(self, due: float | None) -> signal.struct_siginfo | None:
        if due is None:
            return signal.sigwaitinfo(_SIGNALS)
        return signal.sigtimedwait(_SIGNALS, max(due - time.monotonic(), 0.0))

    def _next_restart(self) -> float | None:
        due = [s.restart_at for s in self._slots if s.restart_at is not None]
        return None if self._stopping or not due else min(due)

    def _start(self, slot: _Slot) -> None:
        process = subprocess.Popen(
            [sys.executable, "-m", CHILD_MODULE], stdin=subprocess.PIPE,
            preexec_fn=_die_with_parent(os.getpid(), self._mask), close_fds=True)
        assert process.stdin is not None
        # A few KiB: fits the pipe, never blocks. A child dead already shows in _reap.
        with contextlib.suppress(BrokenPipeError), process.stdin:
            process.stdin.write(encode_settings(slot.settings))
        slot.process, slot.started, slot.restart_at = process, time.monotonic(), None
        logger.info("worker process started", extra={
            "slot": slot.index, "pid": process.pid, "restarts": slot.restarts})

    def _reap(self) -> None:
        for slot in self._slots:
            process = slot.process
            if process is None or process.poll() is None:
                continue
            code = process.returncode
            slot.process = None
            # Stopped by our SIGTERM before its handler was set (still importing): clean.
            slot.clean = code == 0 or (self._stopping and code == -signal.SIGTERM)
            lived = time.monotonic() - slot.started
            how = {"exit_code": code} if code >= 0 else {"signal": signal.Signals(-code).name}
            logger.log(logging.INFO if self._stopping else logging.WARNING,
                       "worker process exited", extra={
                           "slot": slot.index, "pid": process.pid, **how,
                           "up_seconds": round(lived, 1)})
            if self._stopping:
                continue
            slot.quick_exits = 0 if lived >= STABLE_SECONDS else slot.quick_exits + 1
            delay = backoff_seconds(slot.quick_exits)
            slot.restart_at = time.monotonic() + delay
            logger.info("worker process restarting", extra={
                "slot": slot.index, "in_seconds": delay, "quick_exits": slot.quick_exits})

    def _restart_due(self) -> None:
        if self._stopping:
            return
        now = time.monotonic()
        for slot in self._slots:
            if slot.restart_at is not None and slot.restart_at <= now:
                slot.restarts += 1
                self._start(slot)

    def _stop(self) -> None:
        """SIGTERM to every child: they drain and release their leases. Sent again on every
        signal we get (a terminal's Ctrl-C reaches the children too; that is harmless)."""
        if not self._stopping:
            logger.info("stopping worker processes")
        self._stopping = True
        for slot in self._slots:
            slot.restart_at = None
            if slot.process is not None and slot.process.poll() is None:
                slot.process.send_signal(signal.SIGTERM)


def supervise(settings: Settings) -> int:
    """Run ``settings.processes`` worker processes until SIGTERM/SIGINT; the exit status.
    Raises a :class:`~tenantry.errors.TenantryError` (one line) for what every child
    would refuse on."""
    logs.configure(settings.log_format)
    sandbox_probe.require_boundary(settings)
    # One operator token for every child's /metrics (a generated one is kept in the data
    # dir; made here, not raced by N children).
    settings = settings.with_(operator_token=operator_token(settings))
    database = resolve_database(settings)  # starts the embedded one once, for them all
    try:
        asyncio.run(require_current_schema(database.dsn))
    except DATABASE_DOWN as exc:
        database.stop()
        raise StartupFailed(describe_failure(database.dsn, exc)) from None
    except BaseException:
        database.stop()
        raise
    logger.info("supervising worker processes", extra={"processes": settings.processes})
    try:
        return Supervisor(settings, settings.processes).run()
    finally:
        database.stop()
