"""A worker's sandboxes: one per run it drives, created at the run's first built-in tool
call, kept while the run goes on, saved when it parks, destroyed when it ends.

Saving happens at every park, before the slot is given back, and the blob ref goes into the
run's log (``SandboxSaved``) in the same transaction as the park: whichever worker resumes
the run — this one, another, or a fresh one after a crash — restores from the last save.
The parked VM is paused and kept for ``hibernate_after`` seconds in case the run comes back
here soon (an approval answered within minutes); past that it is destroyed (hibernated).
A kept sandbox is reused only if its last save is the one the log names, so a run that
went on elsewhere in between never gets stale files. A run that parks again before using its
sandbox (back from an approval, straight into a model outage) has nothing new to save: its
paused sandbox is not asked (a paused guest cannot answer) and the log's last save stands.

Kept sandboxes hold memory while nobody uses them, so they are bounded: at most
``kept_per_tenant`` per tenant and ``kept_max`` per worker. Past the tenant's cap its own
oldest parked sandbox is hibernated at once; past the worker's, the oldest of the tenant
holding the most — one tenant parking many runs cannot hold the worker's memory, nor push
out a tenant holding fewer. Hibernating loses nothing: the files were saved at the park."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import Any

from tenantry.blobs import BlobQuotaExceeded, BlobStore, BlobStoreUnavailable
from tenantry.db import DATABASE_DOWN
from tenantry.ids import RunId, TenantId
from tenantry.sandbox.pool import WarmPool
from tenantry.sandbox.sandbox import Sandbox, SandboxDriver, SavedFiles
from tenantry.sandbox.types import Binding, Limits, SandboxError, SandboxUnavailable

logger = logging.getLogger(__name__)
#: What a saved files' deletion at a run's end may meet; left to the run's deletion.
_FORGET_FAILURES: tuple[type[Exception], ...] = (BlobStoreUnavailable, *DATABASE_DOWN)

Key = tuple[str, str]


@dataclass(slots=True)
class _Kept:
    sandbox: Sandbox
    saved_ref: str | None = None
    hibernation: asyncio.TimerHandle | None = None
    # The run may have changed its files since saved_ref: only a sandbox handed out by
    # for_run can change them.
    changed: bool = True
    # Set while the run is parked (the order it parked in, oldest lowest): a hibernation
    # meant for one park does nothing once the run came back or parked again.
    parked_seq: int | None = None


class SandboxManager:
    def __init__(
        self, driver: SandboxDriver, blobs: BlobStore, *, limits: Limits,
        hibernate_after: float = 300.0, kept_max: int = 32, kept_per_tenant: int = 8,
        browser_driver: SandboxDriver | None = None, browser_limits: Limits | None = None,
    ) -> None:
        self.driver = driver
        self.blobs = blobs
        self.limits = limits
        # Sandboxes of agents that may use the browser: their own image variant (microvm)
        # and more memory. None: no browser here (the tools say why).
        self.browser_driver = browser_driver
        self.browser_limits = browser_limits or limits
        self.hibernate_after = hibernate_after
        self.kept_max = kept_max
        self.kept_per_tenant = kept_per_tenant
        self._park_order = itertools.count()
        self._kept: dict[Key, _Kept] = {}
        self._locks: dict[Key, asyncio.Lock] = {}
        self.hibernated = 0
        self._background: set[asyncio.Task[None]] = set()

    @property
    def backend(self) -> str:
        return self.driver.backend

    @property
    def live(self) -> int:
        return len(self._kept)

    def pool(self) -> WarmPool | None:
        """The driver's warm pool, for metrics and the console (None: a driver without)."""
        return getattr(self.driver, "pool", None)

    async def for_run(
        self, tenant: TenantId, run: RunId, *, egress: tuple[str, ...] = (),
        restore_ref: str | None = None, browser: bool = False,
    ) -> tuple[Sandbox, bool]:
        """The run's sandbox, and whether this call created it. ``restore_ref`` is the
        last save the run's log names; a fresh sandbox gets those files back. ``browser``:
        the run's agent may use the browser, so each of its sandboxes is a browser one
        (the same for the run's whole life, as the agent's tools are)."""
        key = (tenant.value, str(run))
        async with self._lock(key):
            kept = self._kept.get(key)
            if kept is not None:
                if kept.hibernation is not None:
                    kept.hibernation.cancel()
                    kept.hibernation = None
                kept.parked_seq = None
                if kept.sandbox.alive and kept.saved_ref == restore_ref:
                    try:
                        await kept.sandbox.instance.resume()
                        kept.changed = True
                        return kept.sandbox, False
                    except SandboxError as exc:
                        logger.warning("kept sandbox did not resume: %s", exc)
                await self._destroy(key)
            if browser and self.browser_driver is None:
                raise SandboxUnavailable("no browser sandbox is configured on this worker")
            driver, limits = ((self.browser_driver, self.browser_limits)
                              if browser and self.browser_driver is not None
                              else (self.driver, self.limits))
            sandbox = await driver.create(Binding(tenant, run, egress), limits)
            try:
                if restore_ref is not None:
                    await sandbox.restore_files(self.blobs, restore_ref)
            except BaseException:
                await sandbox.destroy()
                raise
            self._kept[key] = _Kept(sandbox, saved_ref=restore_ref)
            logger.info("sandbox ready", extra={"run_id": str(run), "tenant_id": tenant.value,
                                                **sandbox.describe()})
            return sandbox, True

    async def save(self, tenant: TenantId, run: RunId) -> SavedFiles | None:
        """Save the run's files if it has a live sandbox here (None if it has none, or
        if it has not been used since its last save: that save still holds)."""
        key = (tenant.value, str(run))
        kept = self._kept.get(key)
        if kept is None or not kept.sandbox.alive or not kept.changed:
            return None
        try:
            saved = await kept.sandbox.save_files(self.blobs)
        except BlobQuotaExceeded as exc:
            raise BlobQuotaExceeded(f"the run's sandbox files could not be saved while it "
                                    f"waits: {exc.detail}", **exc.extra) from None
        kept.saved_ref, kept.changed = saved.ref, False
        return saved

    @property
    def kept(self) -> int:
        """Parked runs' sandboxes held here (paused, waiting for their run)."""
        return sum(1 for k in self._kept.values()
                   if k.parked_seq is not None and k.hibernation is not None)

    def parked(self, tenant: TenantId, run: RunId) -> None:
        """The run gave its slot back: pause its sandbox and hibernate it later (or now,
        the oldest first, past the per-tenant or per-worker cap)."""
        key = (tenant.value, str(run))
        kept = self._kept.get(key)
        if kept is None:
            return
        if kept.hibernation is not None:  # parked again while still paused: a new timer
            kept.hibernation.cancel()
            kept.hibernation = None
        seq = kept.parked_seq = next(self._park_order)
        if self.hibernate_after <= 0:
            self._spawn(self._hibernate(key, seq))
            return
        self._spawn(self._pause(kept))
        kept.hibernation = asyncio.get_running_loop().call_later(
            self.hibernate_after, lambda: self._spawn(self._hibernate(key, seq)))
        self._enforce_caps(key[0])

    def _enforce_caps(self, tenant: str) -> None:
        """Hibernate the oldest parked sandboxes past the tenant's cap; then, past the
        worker's, the oldest of whichever tenant holds the most (so a tenant with many
        parked runs pays for the worker's cap, not one with a few)."""
        by_tenant: dict[str, list[tuple[int, Key]]] = {}
        for key, k in self._kept.items():
            if k.parked_seq is not None and k.hibernation is not None:
                by_tenant.setdefault(key[0], []).append((k.parked_seq, key))
        for entries in by_tenant.values():
            entries.sort()
        own = by_tenant.get(tenant, [])
        out = own[:max(0, len(own) - self.kept_per_tenant)]
        del own[:len(out)]
        total = sum(len(entries) for entries in by_tenant.values())
        while total > self.kept_max:
            heaviest = max((e for e in by_tenant.values() if e),
                           key=lambda e: (len(e), -e[0][0]))
            out.append(heaviest.pop(0))
            total -= 1
        for seq, key in out:
            kept = self._kept[key]
            assert kept.hibernation is not None
            kept.hibernation.cancel()
            kept.hibernation = None  # no longer counted: it is on its way out
            logger.info("kept sandboxes over their cap: hibernating the oldest",
                        extra={"tenant_id": key[0], "run_id": key[1]})
            self._spawn(self._hibernate(key, seq))

    async def end(self, tenant: TenantId, run: RunId, last_ref: str | None) -> None:
        """The run ended: its saved files go, and its sandbox (files first: they are the
        cheap part, and a shutdown that cuts this short then leaves no orphaned blob)."""
        if last_ref is not None:
            await self.forget(tenant, last_ref)
        await self.drop(tenant, run)

    async def drop(self, tenant: TenantId, run: RunId) -> None:
        """Destroy without saving (lease lost: the new owner restores the last save)."""
        key = (tenant.value, str(run))
        async with self._lock(key):
            await self._destroy(key)
        self._locks.pop(key, None)

    async def forget(self, tenant: TenantId, ref: str) -> None:
        """The run's saved files go at its end; a store that refuses now leaves them to the
        run's deletion (retention), which finds them in the registry."""
        try:
            await self.blobs.delete(tenant, ref)
        except _FORGET_FAILURES as exc:
            logger.warning("the run's saved files stay until the run is deleted: %s", exc)

    async def destroy_all(self) -> None:
        for key in list(self._kept):
            await self._destroy(key)

    async def close(self) -> None:
        await self.destroy_all()
        await self.driver.close()
        if self.browser_driver is not None and self.browser_driver is not self.driver:
            await self.browser_driver.close()

    # -- inside ------------------------------------------------------------------------

    async def _hibernate(self, key: Key, seq: int) -> None:
        async with self._lock(key):
            kept = self._kept.get(key)
            if kept is None or kept.parked_seq != seq:
                return  # resumed, or parked again, before we got here
            await self._destroy(key)
            self.hibernated += 1
            logger.info("sandbox hibernated: files saved, VM destroyed",
                        extra={"tenant_id": key[0], "run_id": key[1]})

    async def _pause(self, kept: _Kept) -> None:
        with contextlib.suppress(SandboxError):
            await kept.sandbox.instance.pause()

    async def _destroy(self, key: Key) -> None:
        kept = self._kept.pop(key, None)
        if kept is None:
            return
        if kept.hibernation is not None:
            kept.hibernation.cancel()
        try:
            await kept.sandbox.destroy()
        except Exception:
            logger.exception("destroying a sandbox failed", extra={"run_id": key[1]})

    def _lock(self, key: Key) -> asyncio.Lock:
        lock = self._locks.get(key)
        if lock is None:
            lock = self._locks[key] = asyncio.Lock()
        return lock

    def _spawn(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.ensure_future(work)
        self._background.add(task)
        task.add_done_callback(self._background.discard)
