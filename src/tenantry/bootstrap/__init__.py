"""The one place that builds and runs a process: the database it uses (:mod:`.database`),
its secrets (:mod:`.secrets`), the demo tenant (:mod:`.demo`), the engine and worker loops
(:mod:`.worker`), the HTTP API's pieces (:mod:`.api`), the services it runs until signalled
(:mod:`.services`), and what each command runs (:mod:`.process` for ``up``/``api``/``worker``,
:mod:`.commands` for the one-shot ones). ``tenantry.cli`` parses flags and calls these.

Nothing heavy is imported here, so ``tenantry --help`` stays fast."""

from __future__ import annotations

from tenantry.errors import TenantryError


class StartupFailed(TenantryError):
    """A command cannot go on; ``detail`` is the one line the operator reads (the CLI
    prints it and exits 2)."""

    type = "startup_failed"
    title = "Could not start"
