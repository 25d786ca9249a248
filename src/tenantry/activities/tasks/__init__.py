"""Activity tasks: runs of kind ``'activity'``, enqueued through ``ActivityStore`` with the
workflow store's admission and run by the ``Dispatcher``'s attempts. Above the engine and
the workflow store (see ``tenantry.activities``)."""

from tenantry.activities.tasks.dispatcher import Dispatcher
from tenantry.activities.tasks.store import ActivityStore

__all__ = ["ActivityStore", "Dispatcher"]
