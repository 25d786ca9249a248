"""The workers running in this process, for whoever shares the process with them.

`tenantry up` runs the API and its workers in one process; the operator console can then
show what only a worker holds in memory (model breakers, the sandbox pool). The factory
that starts both passes one of these to each; nothing is found through a global."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the API imports this; it need not load the whole engine to do so
    from tenantry.runs.engine import Engine


@dataclass(slots=True)
class LocalWorkers:
    engines: list[Engine] = field(default_factory=list)

    @contextmanager
    def serving(self, engine: Engine) -> Iterator[Engine]:
        """Registered while the block runs: a stopped worker is not shown as live."""
        self.engines.append(engine)
        try:
            yield engine
        finally:
            self.engines.remove(engine)
