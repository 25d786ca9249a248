"""The workers running in this process, for whoever shares the process with them.

`tenantry up` runs the API and its workers in one process; the operator console can then
show what only a worker holds in memory (model breakers, the sandbox pool). The factory
that starts both passes one of these to each; nothing is found through a global."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from tenantry.telemetry.readiness import Check, fixed, sessions

if TYPE_CHECKING:  # the API imports this; it need not load the whole engine to do so
    from tenantry.runs.engine import Engine
    from tenantry.runs.worker import Worker


@dataclass(slots=True)
class LocalWorkers:
    engines: list[Engine] = field(default_factory=list)
    loops: list[Worker] = field(default_factory=list)
    #: Why the sandbox boundary in force is below TENANTRY_SANDBOX_MIN_BOUNDARY (``tenantry
    #: up`` starts anyway), or None: what ``/readyz`` of this process reports.
    weak_boundary: str | None = None

    @contextmanager
    def serving(self, engine: Engine, loop: Worker | None = None) -> Iterator[Engine]:
        """Registered while the block runs: a stopped worker is not shown as live."""
        self.engines.append(engine)
        if loop is not None:
            self.loops.append(loop)
        try:
            yield engine
        finally:
            self.engines.remove(engine)
            if loop is not None:
                self.loops.remove(loop)

    def sessions(self) -> list[bool]:
        """Whether each worker loop running here holds its worker session."""
        return [loop.holds_session() for loop in self.loops]

    def checks(self) -> list[tuple[str, Check]]:
        """What ``/readyz`` asks of a process that runs worker loops."""
        return [("sandbox", fixed(self.weak_boundary)), ("workers", sessions(self.sessions))]
