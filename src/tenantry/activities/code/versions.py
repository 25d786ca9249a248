"""Activity versions: a tenant's activity, immutable once published (ADR 0013).

A version is an agent version (model ``"activity"``, no tools, zero budgets: nothing a
platform worker could act on) plus a row of ``activity_versions`` naming its bundle by
digest and its attempt settings. An activity task is then a run of kind ``'activity'`` that
points at that agent version, so it gets admission, the fair claim, fenced leases and the
event log of runs. Versions count up one at a time, like agent versions.

Everything a tenant could get wrong is refused at publish with a one-line
``ValidationFailed``: a secret name it does not hold, an egress entry that is not a host or
names an internal address, a bad setting. The bundle's own rules are ``Bundle``'s.
"""

from __future__ import annotations

import base64
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import asyncpg

from tenantry.activities.code.bundle import Bundle
from tenantry.agents.spec import AgentSpec, Limits
from tenantry.db import Connection, Database
from tenantry.db.queries import load
from tenantry.errors import Conflict, NotFound, ValidationFailed
from tenantry.ids import AgentId, TenantId
from tenantry.jsonutil import digest
from tenantry.sandbox.egress.policy import (
    EgressPolicy,
    address_refusal,
    literal_address,
    normalize_host,
)

Q = load(__package__)

#: The model name that marks an agent version as an activity version.
ACTIVITY_MODEL = "activity"
MAX_SECRETS = 32
MAX_EGRESS = 32
MAX_TIMEOUT_S = 3600.0
MAX_BATCH_TASKS = 1000
MAX_BATCH_SECONDS = 86400.0
MAX_WARM_IDLE_S = 3600.0
NOT_FOUND = "No activity with this name (or not at this version)."
#: Names that always mean this host or its network, whatever DNS says.
INTERNAL_NAMES = ("localhost", "localhost.localdomain", "metadata.google.internal")
INTERNAL_SUFFIXES = (".localhost", ".internal", ".local")


@dataclass(frozen=True, slots=True)
class BatchSettings:
    """One sandbox serves up to ``max_tasks`` queued tasks of the same tenant and version,
    one after another, while it is younger than ``max_seconds`` (ADR 0014)."""

    max_tasks: int
    max_seconds: float

    def __post_init__(self) -> None:
        _integer("batch.max_tasks", self.max_tasks, 1, MAX_BATCH_TASKS)
        _number("batch.max_seconds", self.max_seconds, 0.0, MAX_BATCH_SECONDS, open_low=True)


@dataclass(frozen=True, slots=True)
class WarmSettings:
    """After a task, its sandbox is kept paused for ``idle_seconds``; the next task of the
    same tenant and version wakes it instead of starting a fresh one (ADR 0014)."""

    idle_seconds: float

    def __post_init__(self) -> None:
        _number("warm.idle_seconds", self.idle_seconds, 0.0, MAX_WARM_IDLE_S, open_low=True)


@dataclass(frozen=True, slots=True)
class ActivitySettings:
    """How attempts of one version run. ``secrets``: the vault names it may read (only
    those reach its sandbox); ``max_sandbox_deaths``: attempts that kill their sandbox
    before the task is dead-lettered. ``batch`` and ``warm`` (both None by default: a fresh
    sandbox per attempt, never reused) let one sandbox serve several of this version's tasks
    of the same tenant (ADR 0014)."""

    timeout_s: float = 60.0
    max_attempts: int = 3
    backoff_s: float = 1.0
    secrets: tuple[str, ...] = ()
    egress: tuple[str, ...] = ()
    retryable_exit_codes: frozenset[int] = frozenset()
    max_sandbox_deaths: int = 3
    heartbeat_timeout_s: float | None = None
    batch: BatchSettings | None = None
    warm: WarmSettings | None = None

    def __post_init__(self) -> None:
        _number("timeout_s", self.timeout_s, 0.0, MAX_TIMEOUT_S, open_low=True)
        _integer("max_attempts", self.max_attempts, 1, 100)
        _number("backoff_s", self.backoff_s, 0.0, 86400.0)
        _integer("max_sandbox_deaths", self.max_sandbox_deaths, 1, 100)
        if self.heartbeat_timeout_s is not None:
            _number("heartbeat_timeout_s", self.heartbeat_timeout_s, 0.0, MAX_TIMEOUT_S,
                    open_low=True)
        object.__setattr__(self, "secrets", _names(self.secrets))
        object.__setattr__(self, "egress", _egress(self.egress))
        codes = frozenset(self.retryable_exit_codes)
        for code in codes:
            _integer("retryable_exit_codes", code, 1, 255)
        object.__setattr__(self, "retryable_exit_codes", codes)
        if self.batch is not None and not isinstance(self.batch, BatchSettings):
            raise ValidationFailed("batch must be BatchSettings(max_tasks, max_seconds)",
                                   field="batch")
        if self.warm is not None and not isinstance(self.warm, WarmSettings):
            raise ValidationFailed("warm must be WarmSettings(idle_seconds)", field="warm")

    @property
    def reuses_sandboxes(self) -> bool:
        """Whether a sandbox of this version may serve more than one task (ADR 0014)."""
        return self.batch is not None or self.warm is not None


@dataclass(frozen=True, slots=True)
class ActivityVersion:
    tenant: TenantId
    name: str
    version: int
    agent_id: AgentId
    bundle: Bundle
    settings: ActivitySettings = field(default_factory=ActivitySettings)


async def publish(db: Database, tenant: TenantId, name: str, bundle: Bundle,
                  settings: ActivitySettings) -> ActivityVersion:
    """Publish the activity's next version (version 1 creates it), in one transaction."""
    if not isinstance(bundle, Bundle):
        raise ValidationFailed("bundle must be a Bundle", field="bundle")
    spec = AgentSpec(model=ACTIVITY_MODEL,
                     system_prompt=f"Activity {name!r}: tenant code run by the activity "
                                   "dispatcher in a fresh sandbox; no model is called.",
                     limits=Limits(max_steps=1, max_tokens=1, max_cost_micros=0)).to_json()
    files = {path: base64.b64encode(data).decode() for path, data in bundle.files.items()}
    async with db.tenant_tx(tenant) as conn:
        if not await conn.fetchval(Q.tenant_exists, tenant.value):
            raise NotFound("No tenant with this id.")
        held = {r["name"] for r in await conn.fetch(Q.existing_secret_names, tenant.value,
                                                    list(settings.secrets))}
        missing = [n for n in settings.secrets if n not in held]
        if missing:
            raise Conflict(f"The tenant has no secret named {missing[0]!r}; store it in the "
                           "vault before an activity may read it.",
                           field="secrets", missing=missing)
        agent_id = AgentId.new()
        version = 1
        if await conn.fetchval(Q.insert_agent, tenant.value, agent_id.uuid, name) is None:
            row = await conn.fetchrow(Q.lock_agent_by_name, tenant.value, name)
            assert row is not None  # the insert conflicted on this name
            if row["first_model"] != ACTIVITY_MODEL:
                raise Conflict(f"{name!r} is one of this tenant's agents, not an activity; "
                               "give the activity another name.", field="name")
            agent_id, version = AgentId(row["agent_id"]), row["latest_version"] + 1
            await conn.execute(Q.bump_latest_version, tenant.value, agent_id.uuid, version)
        await conn.execute(Q.insert_agent_version, tenant.value, agent_id.uuid, version, spec,
                           digest(spec))
        await conn.execute(Q.insert_bundle, tenant.value, bundle.digest, bundle.entrypoint,
                           files)
        await conn.execute(Q.insert_version, tenant.value, agent_id.uuid, version, name,
                           bundle.digest, settings.timeout_s, settings.heartbeat_timeout_s,
                           settings.max_attempts, settings.backoff_s, list(settings.secrets),
                           list(settings.egress), sorted(settings.retryable_exit_codes),
                           settings.max_sandbox_deaths,
                           None if settings.batch is None else settings.batch.max_tasks,
                           None if settings.batch is None else settings.batch.max_seconds,
                           None if settings.warm is None else settings.warm.idle_seconds)
    return ActivityVersion(tenant, name, version, agent_id, bundle, settings)


async def get(db: Database, tenant: TenantId, name: str,
              version: int | None = None) -> ActivityVersion:
    """The version (the latest when ``version`` is None); ``NotFound`` otherwise."""
    async with db.tenant_tx(tenant) as conn:
        row = await conn.fetchrow(Q.get_version, tenant.value, name, version)
    if row is None:
        raise NotFound(NOT_FOUND)
    return _version(tenant, row)


async def get_of_agent(db: Database, tenant: TenantId, agent_id: AgentId,
                       version: int) -> ActivityVersion:
    """The version a task's run points at."""
    async with db.tenant_tx(tenant) as conn:
        return await of_agent(conn, tenant, agent_id, version)


async def of_agent(conn: Connection, tenant: TenantId, agent_id: AgentId,
                   version: int) -> ActivityVersion:
    """The same, in the caller's transaction for ``tenant`` (the dispatcher reads it with
    the task's row: one transaction, not two)."""
    row = await conn.fetchrow(Q.get_version_of_agent, tenant.value, agent_id.uuid, version)
    if row is None:
        raise NotFound(NOT_FOUND)
    return _version(tenant, row)


def _version(tenant: TenantId, row: asyncpg.Record) -> ActivityVersion:
    files: Mapping[str, Any] = row["files"]
    bundle = Bundle({p: base64.b64decode(d) for p, d in files.items()}, row["entrypoint"])
    settings = ActivitySettings(
        timeout_s=row["timeout_s"], max_attempts=row["max_attempts"],
        backoff_s=row["backoff_s"], secrets=tuple(row["secret_names"]),
        egress=tuple(row["egress"]), retryable_exit_codes=frozenset(row["retryable_exit_codes"]),
        max_sandbox_deaths=row["max_sandbox_deaths"],
        heartbeat_timeout_s=row["heartbeat_timeout_s"],
        batch=None if row["batch_max_tasks"] is None
        else BatchSettings(row["batch_max_tasks"], row["batch_max_seconds"]),
        warm=None if row["warm_idle_seconds"] is None
        else WarmSettings(row["warm_idle_seconds"]))
    return ActivityVersion(tenant, row["name"], row["version"], AgentId(row["agent_id"]),
                           bundle, settings)


def _names(names: Iterable[str]) -> tuple[str, ...]:
    if isinstance(names, str):
        raise ValidationFailed("secrets is a list of names, not one string", field="secrets")
    out = tuple(dict.fromkeys(names))
    if len(out) > MAX_SECRETS:
        raise ValidationFailed(f"an activity reads at most {MAX_SECRETS} secrets",
                               field="secrets")
    for name in out:
        # The guest sets each as an environment variable: the same rule as AttemptRequest.
        if not isinstance(name, str) or not name or len(name) > 128 \
                or not (name[0].isalpha() or name[0] == "_") \
                or not all(c.isascii() and (c.isalnum() or c == "_") for c in name):
            raise ValidationFailed(f"secret name {name!r} is not an environment variable name",
                                   field="secrets")
    return out


def _egress(entries: Iterable[str]) -> tuple[str, ...]:
    if isinstance(entries, str):
        raise ValidationFailed("egress is a list of hosts, not one string", field="egress")
    out = tuple(dict.fromkeys(entries))
    if len(out) > MAX_EGRESS:
        raise ValidationFailed(f"an activity lists at most {MAX_EGRESS} egress hosts",
                               field="egress")
    try:
        EgressPolicy(out)
    except (ValueError, AttributeError) as exc:
        raise ValidationFailed(str(exc), field="egress") from None
    for entry in out:
        reason = _internal(entry)
        if reason is not None:
            raise ValidationFailed(f"egress entry {entry!r} is internal ({reason}); an "
                                   "activity may only reach public hosts", field="egress")
    return out


def _internal(entry: str) -> str | None:
    """Why an allow-list entry names this host's or a private network, or None. Names are
    vetted again at connect time by the egress proxy (DNS can change); this refuses what
    is internal by its spelling alone."""
    text = entry.strip().lower()
    host, colon, port = text.rpartition(":")
    if not colon or not port.isdigit() or (text.startswith("[") and not host.endswith("]")):
        host = text
    host = host.removeprefix("*.")
    name = normalize_host(host)
    if name is None:
        return "not a host name"
    address = literal_address(name)
    if address is not None:
        return address_refusal(address)
    if name in INTERNAL_NAMES or name.endswith(INTERNAL_SUFFIXES) or "." not in name:
        return "a local or internal name"
    return None


def _number(name: str, value: object, low: float, high: float, *,
            open_low: bool = False) -> None:
    ok = (not isinstance(value, bool) and isinstance(value, int | float)
          and math.isfinite(value) and (low < value if open_low else low <= value)
          and value <= high)
    if not ok:
        raise ValidationFailed(f"{name} must be a number from {low:g} "
                               f"({'exclusive' if open_low else 'inclusive'}) to {high:g}",
                               field=name)


def _integer(name: str, value: object, low: int, high: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ValidationFailed(f"{name} must be an integer from {low} to {high}", field=name)
