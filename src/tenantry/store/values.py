"""The library's values: tasks, leases, signals and the tenant policy in the library's words.

A task id is a run id (``run_…``): a task *is* a run of kind ``'task'``, so it has the same
id, event log and row as an agent run and is visible in the HTTP API's ``/v1/runs`` too.
A second ``task_`` prefix for the same row would give one thing two names.

Argument checks raise :class:`tenantry.errors.ValidationFailed` (a ``TenantryError``), so a
platform that exposes the store over its own HTTP API maps them like every other error.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from tenantry.errors import ValidationFailed
from tenantry.ids import RunId, TenantId
from tenantry.jsonutil import dumps
from tenantry.runs.events import RunStatus
from tenantry.scheduler import policy as scheduler_policy

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:/-]{0,127}$")
PRIORITIES = ("interactive", "batch")
#: Task versions are positive and published in order (see task_types); this bounds them.
MAX_VERSION = 1_000_000
#: Inputs and results; the same default as the HTTP API's request body limit.
MAX_PAYLOAD_BYTES = 1024 * 1024
#: A signal's data: signals are nudges ("approved"), not a channel for documents.
MAX_SIGNAL_BYTES = 64 * 1024


def check_name(name: str, what: str) -> str:
    if not isinstance(name, str) or not _NAME.match(name):
        raise ValidationFailed(
            f"{what} must be 1-128 characters of A-Z, a-z, 0-9, '_', '.', ':', '/' or '-', "
            "starting with a letter or digit", field=what)
    return name


def check_json(value: Any, what: str, limit: int) -> int:
    """The value's encoded size; refuse what is not JSON or is larger than ``limit``."""
    try:
        size = len(dumps(value))
    except TypeError as exc:
        raise ValidationFailed(f"{what} must be JSON-serializable: {exc}", field=what) from None
    if size > limit:
        raise ValidationFailed(f"{what} is {size} bytes encoded; the limit is {limit}",
                               field=what, limit_value=limit, current=size)
    return size


@dataclass(frozen=True, slots=True)
class Task:
    """A unit of work for one tenant: type ``name`` at ``version``, with a JSON ``input``.

    Build it with :meth:`new` and attach the tenant the caller authenticated with
    :meth:`with_tenant`; ``WorkflowStore.enqueue`` refuses a task without one. No input
    (``None``) is stored as ``{}``: a run's input is always a JSON value.
    """

    name: str
    version: int
    input: Any
    tenant: TenantId | None = None
    priority: str = "interactive"

    @classmethod
    def new(
        cls, name: str, version: int = 1, input: Any = None, *, priority: str = "interactive",
    ) -> Task:
        check_name(name, "name")
        if isinstance(version, bool) or not isinstance(version, int) \
                or not 1 <= version <= MAX_VERSION:
            raise ValidationFailed(f"version must be an integer from 1 to {MAX_VERSION}",
                                   field="version")
        if priority not in PRIORITIES:
            raise ValidationFailed(f"priority must be one of {PRIORITIES}", field="priority")
        if input is None:
            input = {}
        check_json(input, "input", MAX_PAYLOAD_BYTES)
        return cls(name, version, input, None, priority)

    def with_tenant(self, tenant: TenantId) -> Task:
        if not isinstance(tenant, TenantId):
            # A plain string is how a tenant id from a request body would arrive: parse the
            # authenticated identity with TenantId.parse instead.
            raise TypeError("with_tenant takes a TenantId (TenantId.parse(...))")
        return dataclasses.replace(self, tenant=tenant)


@dataclass(frozen=True, slots=True)
class TaskLease:
    """The right to work on one task until the lease expires or its epoch moves on.

    ``epoch`` is the fencing token: every write under the lease names it, and a claim by
    another worker (after this lease expired) bumps it, so this holder can write nothing
    more. It also counts the task's claims: epoch 3 is the third attempt. Two leases are
    equal when they name the same task and epoch (so leases go in sets, as ``renew``
    answers).
    """

    tenant: TenantId
    task_id: RunId
    epoch: int
    worker_id: str = field(compare=False)
    name: str = field(compare=False)
    version: int = field(compare=False)
    input: Any = field(compare=False)


@dataclass(frozen=True, slots=True)
class Signal:
    seq: int  # its slot in the task's event log
    name: str
    data: Any
    created_at: datetime


@dataclass(frozen=True, slots=True)
class TaskRecord:
    """A task as stored now. ``result`` is what ``complete`` recorded (the run's answer);
    ``error`` what ``fail`` recorded. ``cancel_requested`` is set when someone asked the HTTP
    API to cancel the task while a worker held it: the worker decides when to stop."""

    task_id: RunId
    tenant: TenantId
    name: str
    version: int
    status: RunStatus
    input: Any
    result: Any
    error: Any
    priority: str
    idempotency_key: str | None
    cancel_requested: bool
    epoch: int
    last_seq: int
    created_at: datetime
    updated_at: datetime
    started_at: datetime | None
    finished_at: datetime | None


@dataclass(frozen=True, slots=True)
class TenantPolicy:
    """A tenant's limits in the library's words; the same row as the platform's policy
    (:class:`tenantry.scheduler.policy.TenantPolicy`), so agent runs and tasks share them.

    ``max_non_terminal``: tasks and runs not yet ended (queued, running or waiting); past it
    ``enqueue`` answers ``QuotaExceeded``. ``max_leases``: tasks and runs held by workers at
    once; past it the tenant's work waits in the queue (it is not refused). ``weight``: its
    share when workers are contended. ``tokens_per_minute`` and ``monthly_spend_cap_micros``:
    None is no limit; a tenant over its spend cap gets ``BudgetExhausted`` and no claims.
    """

    max_non_terminal: int = 10_000
    max_leases: int = 100
    weight: int = 1
    tokens_per_minute: int | None = None
    monthly_spend_cap_micros: int | None = None

    def __post_init__(self) -> None:
        # The same bounds as the database's CHECK constraints, said in the caller's words.
        _bounded("max_non_terminal", self.max_non_terminal, 1, 10_000_000)
        _bounded("max_leases", self.max_leases, 1, 100_000)
        _bounded("weight", self.weight, 1, 1000)
        if self.tokens_per_minute is not None:
            _bounded("tokens_per_minute", self.tokens_per_minute, 1, 10**15)
        if self.monthly_spend_cap_micros is not None:
            _bounded("monthly_spend_cap_micros", self.monthly_spend_cap_micros, 0, 10**15)

    def apply_to(self, base: scheduler_policy.TenantPolicy) -> scheduler_policy.TenantPolicy:
        """The platform policy with these limits, keeping what the library does not set
        (the approval expiry)."""
        return dataclasses.replace(
            base, weight=self.weight, max_running=self.max_leases,
            max_queued=self.max_non_terminal, tokens_per_minute=self.tokens_per_minute,
            monthly_spend_cap_micros=self.monthly_spend_cap_micros,
        )

    @classmethod
    def from_scheduler(cls, policy: scheduler_policy.TenantPolicy) -> TenantPolicy:
        return cls(
            max_non_terminal=policy.max_non_terminal, max_leases=policy.max_leases,
            weight=policy.weight, tokens_per_minute=policy.tokens_per_minute,
            monthly_spend_cap_micros=policy.monthly_spend_cap_micros,
        )


def _bounded(name: str, value: int, low: int, high: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ValidationFailed(f"{name} must be an integer from {low} to {high}", field=name)
