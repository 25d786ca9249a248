"""Activity sandboxes that serve more than one task: batching and warm state (ADR 0014).

Opt-in per activity version (``ActivitySettings.batch`` / ``.warm``); without either, an
attempt keeps ADR 0012's fresh sandbox, never reused. A reusable sandbox is keyed by
``(tenant, agent id, version)`` and its ``Binding.serves`` names that version, so it is never
handed to another tenant or another version: ``take`` checks the key *and* the binding.

Between two tasks the sandbox is scrubbed (``scrub``): every process an execution left
behind is killed, and the work directory, ``/tmp``, ``/var/tmp`` and ``/dev/shm`` are
emptied; the scrub then lists them, and a sandbox that is not clean is destroyed, never
reused. Secrets never were in a file (ADR 0012: the runner's stdin), and each task gets its
own on its own stdin, so no task's secrets wait in the sandbox for the next.

A kept sandbox is paused (microVM: QMP ``stop``; gVisor: ``runsc pause``; bubblewrap: the
cgroup freezer) and destroyed when its idle time passes, when the dispatcher stops, and on
every error path. Caps, like ``SandboxManager._enforce_caps`` (and the same settings,
``TENANTRY_SANDBOX_KEPT_MAX`` / ``_PER_TENANT``): a tenant keeps at most its
``max_activity_slots`` and at most ``kept_per_tenant`` (its oldest go first), the process at
most ``kept_max`` (the oldest of whichever tenant keeps the most go first)."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import time
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import Any

import orjson

from tenantry.ids import AgentId, AttemptId, TenantId
from tenantry.sandbox import Binding, Limits, Sandbox, SandboxDriver, SandboxError

logger = logging.getLogger(__name__)

#: (tenant, agent id, version): whose and which version's tasks a sandbox may serve.
ReuseKey = tuple[str, str, int]
SCRUB_TIMEOUT_S = 30.0

# Runs as one execution (the sandbox user, in the work directory, in a session of its own:
# the agent's child calls setsid). Processes of this user outside the agent's session and
# this one are what earlier executions left behind (an execution cannot rejoin the agent's
# session); the agent, and on bubblewrap the egress relay beside it, stay. Then the
# writable places are emptied, and what is left is reported for the host to judge.
_SCRUB = r"""
import json, os, shutil, signal

def session(pid):
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[3])

me, uid = os.getpid(), os.getuid()
spare = {session(os.getppid()), session(me)}
strays = []
for _ in range(3):
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) in (1, me, os.getppid()):
            continue
        try:
            if os.stat(f"/proc/{name}").st_uid == uid and session(int(name)) not in spare:
                os.kill(int(name), signal.SIGKILL)
                found.append(int(name))
        except (OSError, ValueError, IndexError):
            pass
    strays = found
    if not found:
        break

def owned(path):
    try:
        return os.lstat(path).st_uid == uid
    except OSError:
        return False

places = [os.getcwd(), "/tmp", "/var/tmp", "/dev/shm"]
for place in places:
    try:
        names = os.listdir(place)
    except OSError:
        continue
    for name in names:
        full = os.path.join(place, name)
        if not owned(full):
            continue
        if os.path.isdir(full) and not os.path.islink(full):
            # Writable all the way down first (a task may leave a read-only folder): walked
            # top-down, each folder is opened up before it is entered.
            os.chmod(full, 0o700)
            for root, dirs, _ in os.walk(full):
                for d in dirs:
                    sub = os.path.join(root, d)
                    if owned(sub) and not os.path.islink(sub):
                        try:
                            os.chmod(sub, 0o700)
                        except OSError:
                            pass
            shutil.rmtree(full, ignore_errors=True)
        else:
            try:
                os.unlink(full)
            except OSError:
                pass
left = {}
for place in places:
    try:
        left[place] = sorted(os.listdir(place))
    except OSError:
        pass
print(json.dumps({"left": left, "killed": len(strays)}))
"""


async def scrub(sandbox: Sandbox) -> bool:
    """Empty the sandbox of the task it served; True only if it is clean and alive (the
    work directory and ``/tmp`` empty). False: destroy it, do not reuse it."""
    if not sandbox.alive:
        return False
    try:
        done = await sandbox.run_python(_SCRUB, timeout_s=SCRUB_TIMEOUT_S)
        report = orjson.loads(done.stdout.strip().splitlines()[-1]) if done.stdout else {}
    except (SandboxError, orjson.JSONDecodeError, IndexError) as exc:
        logger.warning("scrubbing an activity sandbox failed: %s", exc)
        return False
    left = report.get("left", {}) if isinstance(report, dict) else {}
    clean = done.exit_code == 0 and isinstance(left, dict) and "/tmp" in left \
        and all(not entries for entries in left.values())
    if not clean:
        logger.warning("an activity sandbox is not clean after its task: destroyed "
                       "(exit %s, left %.500s, %.2000s)", done.exit_code, left, done.stderr,
                       extra={"sandbox_id": sandbox.id})
    return clean and sandbox.alive


def reuse_key(tenant: TenantId, agent_id: AgentId, version: int) -> ReuseKey:
    return (tenant.value, str(agent_id), version)


def serves(key: ReuseKey) -> str:
    """What ``Binding.serves`` says for a sandbox of this key."""
    return f"{key[1]}@{key[2]}"


@dataclass(slots=True)
class Lived:
    """A reusable sandbox and how much it has served."""

    sandbox: Sandbox
    key: ReuseKey
    tasks: int = 0  # tasks served over its whole life (batches and wakes)
    wakes: int = 0
    kept_seq: int | None = None  # set while kept (the order it was kept in, oldest lowest)
    expiry: asyncio.TimerHandle | None = None
    born: float = field(default_factory=time.monotonic)


class WarmSandboxes:
    """The reusable activity sandboxes of one dispatcher. ``take`` one for a task (woken
    from the kept ones of that key, or fresh), ``keep`` it after, or ``discard`` it."""

    def __init__(self, driver: SandboxDriver, *, kept_max: int = 32,
                 kept_per_tenant: int = 8) -> None:
        if kept_max < 0 or kept_per_tenant < 0:
            raise ValueError("kept_max and kept_per_tenant are at least 0")
        self.driver = driver
        self.kept_max = kept_max
        self.kept_per_tenant = kept_per_tenant
        self._kept: dict[ReuseKey, list[Lived]] = {}
        self._order = itertools.count()
        self._background: set[asyncio.Task[None]] = set()
        #: What happened to kept sandboxes: "woken", "expired", "capped", "stale"
        #: (no longer alive when taken): for metrics and the tests.
        self.counts: dict[str, int] = {}

    def kept(self, tenant: TenantId | None = None) -> list[Lived]:
        return [lived for key, entries in self._kept.items() for lived in entries
                if tenant is None or key[0] == tenant.value]

    async def take(self, key: ReuseKey, egress: tuple[str, ...], limits: Limits
                   ) -> tuple[Lived, bool]:
        """A sandbox for the next task of ``key``, and whether it was woken (kept from an
        earlier task of the same tenant and version) rather than fresh."""
        entries = self._kept.get(key, [])
        while entries:
            lived = entries.pop()  # the most recently kept: the likeliest to be alive
            if not entries:
                self._kept.pop(key, None)
            self._unkeep(lived)
            binding = lived.sandbox.binding
            # Never another tenant's or version's: the key says so, and so must the binding.
            if binding.tenant.value != key[0] or binding.serves != serves(key) \
                    or not lived.sandbox.alive:
                self._count("stale")
                await self._destroy(lived)
                continue
            try:
                await lived.sandbox.instance.resume()
            except SandboxError as exc:
                logger.warning("a kept activity sandbox did not wake: %s", exc)
                self._count("stale")
                await self._destroy(lived)
                continue
            lived.wakes += 1
            self._count("woken")
            return lived, True
        binding = Binding(TenantId(key[0]), AttemptId.new(), egress, serves=serves(key))
        return Lived(await self.driver.create(binding, limits), key), False

    async def keep(self, lived: Lived, idle_seconds: float, tenant_cap: int) -> None:
        """Pause it and keep it for ``idle_seconds`` for the next task of its key (the
        caller scrubbed it). Past the caps the oldest kept ones are destroyed at once."""
        try:
            # Paused before it can be taken: a wake never races a pause.
            await lived.sandbox.instance.pause()
        except SandboxError as exc:
            logger.warning("an activity sandbox did not pause: destroyed (%s)", exc)
            await self._destroy(lived)
            return
        except BaseException:  # cancelled mid-pause: not kept, so not left behind either
            await self._destroy(lived)
            raise
        lived.kept_seq = next(self._order)
        self._kept.setdefault(lived.key, []).append(lived)
        lived.expiry = asyncio.get_running_loop().call_later(
            idle_seconds, lambda: self._spawn(self._expire(lived)))
        self._enforce_caps(lived.key[0], tenant_cap)

    async def discard(self, lived: Lived) -> None:
        """Destroy it (an error, a kill, a task that leaves it unclean, no warm state)."""
        await self._destroy(lived)

    async def close(self) -> None:
        """Destroy every kept sandbox (the dispatcher stops)."""
        for entries in list(self._kept.values()):
            for lived in list(entries):
                self._remove(lived)
                await self._destroy(lived)
        for task in list(self._background):
            with contextlib.suppress(BaseException):
                await task

    # -- inside ------------------------------------------------------------------------

    def _enforce_caps(self, tenant: str, tenant_cap: int) -> None:
        own = sorted((lived for lived in self.kept() if lived.key[0] == tenant),
                     key=lambda lived: lived.kept_seq or 0)
        out = own[:max(0, len(own) - min(tenant_cap, self.kept_per_tenant))]
        for lived in out:
            self._remove(lived)
        while len(self.kept()) > self.kept_max:
            by_tenant: dict[str, list[Lived]] = {}
            for lived in self.kept():
                by_tenant.setdefault(lived.key[0], []).append(lived)
            heaviest = max(by_tenant.values(),
                           key=lambda e: (len(e), -min(x.kept_seq or 0 for x in e)))
            oldest = min(heaviest, key=lambda lived: lived.kept_seq or 0)
            self._remove(oldest)
            out.append(oldest)
        for lived in out:
            logger.info("kept activity sandboxes over their cap: destroying the oldest",
                        extra={"tenant_id": lived.key[0], "sandbox_id": lived.sandbox.id})
            self._count("capped")
            self._spawn(self._destroy(lived))

    async def _expire(self, lived: Lived) -> None:
        if lived.kept_seq is None:
            return  # woken (or destroyed) before its idle time passed
        self._remove(lived)
        self._count("expired")
        await self._destroy(lived)

    def _remove(self, lived: Lived) -> None:
        entries = self._kept.get(lived.key, [])
        if lived in entries:
            entries.remove(lived)
            if not entries:
                self._kept.pop(lived.key, None)
        self._unkeep(lived)

    @staticmethod
    def _unkeep(lived: Lived) -> None:
        lived.kept_seq = None
        if lived.expiry is not None:
            lived.expiry.cancel()
            lived.expiry = None

    async def _destroy(self, lived: Lived) -> None:
        try:
            # Shielded: a cancellation must not leave the sandbox behind.
            await asyncio.shield(lived.sandbox.destroy())
        except asyncio.CancelledError:
            raise
        except Exception:
            logger.exception("destroying an activity sandbox failed",
                             extra={"sandbox_id": lived.sandbox.id})

    def _count(self, what: str) -> None:
        self.counts[what] = self.counts.get(what, 0) + 1

    def _spawn(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.ensure_future(work)
        self._background.add(task)
        task.add_done_callback(self._background.discard)
