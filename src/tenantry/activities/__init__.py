"""Activities: tenants' own code, run as tasks in sandboxes (ADR 0012 to 0015). The feature
lives here, in two halves on either side of the engine (``tenantry.runs``):

- ``code/``, below the engine: the bundle a tenant uploads (``bundle.py``), its immutable
  versions (``versions.py``, their SQL in ``queries.sql``), one attempt of it in a fresh
  sandbox (``attempt.py``; no database), the reusable sandboxes of batched and warm
  versions (``warm.py``) and the attempt's path a pooled sandbox is warmed with
  (``warmup.py``). The engine reads versions when a run calls an activity as a tool.
- ``tasks/``, above the engine and the workflow store (a task is a run of kind
  ``'activity'``): ``ActivityStore`` publishes, enqueues, reads, cancels and requeues
  (``store.py``, its SQL in ``queries.sql``); the ``Dispatcher`` claims tasks and runs
  their attempts (``dispatcher.py``) and what each outcome means for its task is written
  under the lease (``recording.py``); a batch's next task (``batches.py``), the egress
  refused during attempts (``attempt_egress.py``) and the metrics (``metrics.py``).

Elsewhere, each in its own layer: the HTTP routes (``api/activities.py``) and the
console's dead letters, the process (``bootstrap/activities.py``), the engine's side of an
activity called as a tool (``runs/activity_step.py``, ``runs/activity_calls.py``), an agent
version's ``activity:<name>`` tools (``agents/activity_tools.py``), and the runner inside
the guest (``sandbox/guest/runner.py``).

This module re-exports the code half only: the engine imports ``code`` and ``tasks``
imports the engine, so importing ``tasks`` here would be a cycle when the engine loads."""

from tenantry.activities.code.attempt import (
    AttemptOutcome,
    AttemptRequest,
    run_attempt,
    run_attempt_in,
)
from tenantry.activities.code.bundle import Bundle
from tenantry.activities.code.versions import ActivitySettings, BatchSettings, WarmSettings

__all__ = ["ActivitySettings", "AttemptOutcome", "AttemptRequest", "BatchSettings", "Bundle",
           "WarmSettings", "run_attempt", "run_attempt_in"]
