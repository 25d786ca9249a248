"""Tenantry's store as a Python library (docs/how-to/library.md): tenant-scoped tasks with
admission, fair claims, fenced leases and signals, for platforms that keep their own loop.

```python
tenant = TenantId.parse("tenant-acme")            # from authenticated identity, never a body
await store.set_tenant_policy(tenant, TenantPolicy(max_non_terminal=1_000, max_leases=20))
task = Task.new("order-review", version=1, input=payload).with_tenant(tenant)
result = await store.enqueue(task)                # Admitted | Overloaded | QuotaExceeded
lease = await store.claim(worker_id, batch=8)     # fair across tenants, bounded batch
await store.signal(tenant, task_id, "approved", data)   # signals scoped by tenant too
```

See docs/how-to/library.md.
"""

from __future__ import annotations

from tenantry.ids import RunId, TenantId
from tenantry.runs.events import Event, RunStatus
from tenantry.runs.lease import worker_id as new_worker_id
from tenantry.store.results import (
    Admitted,
    BudgetExhausted,
    EnqueueResult,
    Overloaded,
    QuotaExceeded,
)
from tenantry.store.task_types import TaskType
from tenantry.store.values import Signal, Task, TaskLease, TaskRecord, TenantPolicy
from tenantry.store.workflow import WorkflowStore

__all__ = [
    "Admitted",
    "BudgetExhausted",
    "EnqueueResult",
    "Event",
    "Overloaded",
    "QuotaExceeded",
    "RunId",
    "RunStatus",
    "Signal",
    "Task",
    "TaskLease",
    "TaskRecord",
    "TaskType",
    "TenantId",
    "TenantPolicy",
    "WorkflowStore",
    "new_worker_id",
]
