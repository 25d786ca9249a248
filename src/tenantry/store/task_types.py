"""Task types: a tenant's agent, owned by the store, whose versions are marked as tasks.

Why an agent: a run references an immutable agent version (a foreign key), is counted by
the tenant's policy and shows in the same event log. Making a task type an agent gives
tasks all of that with no second table or second scheduler. Its spec says what it is:
model ``"task"``, no tools, zero budgets — nothing a platform worker could act on.

Registration is lazy: the first ``enqueue`` of ``(name, version)`` for a tenant creates the
agent (version 1) or publishes the next version, and the store remembers the answer, so
later enqueues cost nothing extra. ``WorkflowStore.register_task`` does the same ahead of
time. Versions count up one at a time like agent versions (they are immutable, and a task
type at version 3 with no 2 would be a hole nobody can explain): enqueueing version
``latest + 1`` publishes it, anything beyond is refused. A tenant's ordinary agent with the
same name is never taken for a task type: that is a ``Conflict``.

Writes go through :mod:`tenantry.agents.service`; only the lookup by name is SQL of our own,
because that service has no such lookup.
"""

from __future__ import annotations

from dataclasses import dataclass

from tenantry.agents import service as agents
from tenantry.agents.spec import AgentSpec, Limits
from tenantry.db import Database
from tenantry.db.queries import load
from tenantry.errors import Conflict, NotFound, ValidationFailed
from tenantry.ids import AgentId, TenantId

Q = load(__package__)

#: The model name that marks an agent version as a task type.
TASK_MODEL = "task"
#: Positive answers remembered per store; cleared whole when full (simple and bounded).
CACHE_SIZE = 10_000
UNKNOWN_TENANT = ("No tenant with this id. set_tenant_policy (or ensure_tenant) creates "
                  "a tenant before its first task.")


@dataclass(frozen=True, slots=True)
class TaskType:
    tenant: TenantId
    name: str
    version: int
    agent_id: AgentId


def task_spec(name: str) -> AgentSpec:
    return AgentSpec(
        model=TASK_MODEL,
        system_prompt=f"Task type {name!r}: run by the tenant's own loop through "
                      "tenantry.store; no model is called.",
        limits=Limits(max_steps=1, max_tokens=1, max_cost_micros=0),
    )


class TaskTypes:
    """Resolves ``(tenant, name, version)`` to the agent that stands for it."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self._known: dict[tuple[str, str, int], AgentId] = {}

    async def resolve(self, tenant: TenantId, name: str, version: int) -> TaskType:
        key = (tenant.value, name, version)
        agent_id = self._known.get(key)
        if agent_id is None:
            agent_id = await self._register(tenant, name, version)
            if len(self._known) >= CACHE_SIZE:
                self._known.clear()
            self._known[key] = agent_id
        return TaskType(tenant, name, version, agent_id)

    async def _register(self, tenant: TenantId, name: str, version: int) -> AgentId:
        # Two processes registering at once: the loser's insert is refused (Conflict) and
        # it reads again, finding what the winner made. Three reads settle any such race.
        for _ in range(3):
            async with self.db.tenant_tx(tenant) as conn:
                row = await conn.fetchrow(Q.task_type, tenant.value, name, version)
            assert row is not None  # one row always: the LEFT JOIN keeps it
            if not row["tenant_exists"]:
                raise NotFound(UNKNOWN_TENANT)
            if row["agent_id"] is None:
                if version != 1:
                    raise ValidationFailed(
                        f"Task type {name!r} has no versions yet; its first is version 1.",
                        field="version", next_version=1)
                try:
                    created = await agents.create_agent(self.db, tenant, name, task_spec(name))
                except Conflict:
                    continue
                return created.agent_id
            agent_id = AgentId(row["agent_id"])
            if row["version_model"] is not None:
                _check_is_task(name, row["version_model"])
                return agent_id
            _check_is_task(name, row["latest_model"])
            latest: int = row["latest_version"]
            if version != latest + 1:
                raise ValidationFailed(
                    f"Task type {name!r} is at version {latest}; versions are published in "
                    f"order, so the next is {latest + 1}.",
                    field="version", next_version=latest + 1)
            try:
                await agents.create_version(self.db, tenant, agent_id, task_spec(name),
                                            expected_version=version)
            except Conflict:
                continue
            return agent_id
        raise Conflict(f"Task type {name!r} is being changed concurrently; try again.")


def _check_is_task(name: str, model: str | None) -> None:
    if model != TASK_MODEL:
        raise Conflict(f"{name!r} is one of this tenant's agents, not a task type; "
                       "give the task type another name.", field="name")
