"""A sandbox bound to one run: the only way platform code talks to a guest. It wraps a
backend's ``Instance`` with the run's binding and limits, and counts its time (the trace
shows sandbox time; tenants pay per sandbox second). ``SandboxDriver`` is what hands one
out (the pool, in ``pool.py``)."""

from __future__ import annotations

import base64
import time
from dataclasses import dataclass, field
from typing import Any, Protocol

from tenantry.blobs import BlobKind, BlobStore
from tenantry.ids import RunId
from tenantry.sandbox.backends.protocol import Instance
from tenantry.sandbox.channel import GRACE_SECONDS
from tenantry.sandbox.types import (
    Binding,
    ExecResult,
    FileEntry,
    Limits,
    ResourceUsage,
    SandboxError,
    SandboxLost,
    SandboxRefused,
)

#: Largest file the built-in tools move in one call (the agent enforces its own 16 MiB).
MAX_FILE_BYTES = 4 * 1024 * 1024
#: Seconds the guest may take to start its browser (under software emulation, many).
BROWSER_START_S = 120.0


@dataclass(frozen=True, slots=True)
class BrowserReply:
    """What a browser action came to: a result, a refusal the model can act on (a scheme,
    a cap, no such element), or a failure (the browser died or timed out; the next action
    starts a fresh one). ``started_ms``: this action started the browser, in that time."""

    result: dict[str, Any] | None
    refused: str | None = None
    failed: str | None = None
    started_ms: float | None = None


@dataclass(frozen=True, slots=True)
class SavedFiles:
    """Where a run's work directory was saved (a blob ref), and what it cost."""

    ref: str
    bytes: int
    duration_ms: float


@dataclass(slots=True)
class Sandbox:
    instance: Instance
    binding: Binding
    limits: Limits
    warm: bool  # came from the warm pool (False: restored or booted while the run waited)
    ready_ms: float  # from the request for a sandbox to one that answers
    busy_ms: float = 0.0  # time spent in executions and file transfers
    created_at: float = field(default_factory=time.monotonic)
    restored_from: str | None = None  # the blob ref its files came from, if any
    destroyed: bool = False

    @property
    def backend(self) -> str:
        return self.instance.backend

    @property
    def id(self) -> str:
        return self.instance.id

    @property
    def alive(self) -> bool:
        return not self.destroyed and self.instance.alive and not self.instance.channel.closed

    def start_metering(self) -> None:
        """Count usage from now on (see ``Instance.start_metering``)."""
        self.instance.start_metering()

    def usage(self) -> ResourceUsage | None:
        """What it used since it was bound (host-measured; after destroy, the final
        figures): None when its backend cannot tell."""
        return self.instance.usage()

    def describe(self) -> dict[str, Any]:
        return {"backend": self.backend, "id": self.id, "warm": self.warm,
                "ready_ms": round(self.ready_ms, 3)}

    # -- executions --------------------------------------------------------------------

    async def run_python(self, code: str, *, timeout_s: float | None = None,
                         stdin: str | None = None, max_output: int | None = None,
                         idempotency_key: str | None = None) -> ExecResult:
        """``stdin`` (≤ 64 KiB) reaches only this execution, never a file; ``max_output``
        caps each stream (the agent's default: 256 KiB); ``idempotency_key``: the tool
        call's, for the code to pass on (the guest puts it in TENANTRY_IDEMPOTENCY_KEY and
        /tmp/tenantry/idempotency-key)."""
        what: dict[str, Any] = {"python": code}
        if stdin is not None:
            what["stdin"] = stdin
        if max_output is not None:
            what["max_output"] = max_output
        if idempotency_key is not None:
            what["idempotency_key"] = idempotency_key
        return await self._exec(what, timeout_s)

    async def run_shell(self, command: str, *, timeout_s: float | None = None,
                        idempotency_key: str | None = None) -> ExecResult:
        what: dict[str, Any] = {"shell": command}
        if idempotency_key is not None:
            what["idempotency_key"] = idempotency_key
        return await self._exec(what, timeout_s)

    async def run(self, argv: list[str], *, timeout_s: float | None = None) -> ExecResult:
        return await self._exec({"argv": argv}, timeout_s)

    async def _exec(self, what: dict[str, Any], timeout_s: float | None) -> ExecResult:
        timeout = min(timeout_s or self.limits.timeout_s, self.limits.timeout_s)
        reply = await self._request("exec", timeout=timeout + GRACE_SECONDS,
                                    timeout_s=timeout, **what)
        return ExecResult(int(reply["exit_code"]), str(reply["stdout"]), str(reply["stderr"]),
                          float(reply["duration_ms"]), bool(reply.get("truncated")))

    # -- the browser -------------------------------------------------------------------

    async def browser(self, action: str, *, timeout_s: float, **fields: Any) -> BrowserReply:
        """One action of the sandbox's browser (``guest/browser.py``), started by the first.
        ``timeout_s`` bounds the action (a page load); starting the browser, the first time,
        has ``BROWSER_START_S`` more."""
        reply = await self._request("browser", timeout=timeout_s + BROWSER_START_S
                                    + GRACE_SECONDS, action=action, timeout_s=timeout_s,
                                    start_timeout_s=BROWSER_START_S, **fields)
        started = reply.get("started_ms")
        return BrowserReply(reply.get("result"), reply.get("refused"), reply.get("failed"),
                            None if started is None else float(started))

    # -- files -------------------------------------------------------------------------

    async def write_file(self, path: str, data: bytes) -> int:
        if len(data) > MAX_FILE_BYTES:
            raise SandboxRefused(f"file larger than {MAX_FILE_BYTES} bytes")
        reply = await self._request("write", path=path, data=base64.b64encode(data).decode())
        return int(reply["bytes"])

    async def read_file(self, path: str, *, max_bytes: int = MAX_FILE_BYTES
                        ) -> tuple[bytes, int, bool]:
        """(data, the file's full size, whether data stops short of it)."""
        reply = await self._request("read", path=path, max_bytes=min(max_bytes, MAX_FILE_BYTES))
        return base64.b64decode(reply["data"]), int(reply["size"]), bool(reply["truncated"])

    async def list_files(self, path: str = ".") -> list[FileEntry]:
        reply = await self._request("list", path=path)
        return [FileEntry(e["name"], e["kind"], int(e["size"])) for e in reply["entries"]]

    async def save_files(self, blobs: BlobStore) -> SavedFiles:
        """The work directory, tarred in the guest, into the blob store under the tenant."""
        started = time.perf_counter()
        reply = await self._request("save", timeout=120.0)
        data = base64.b64decode(reply["tar"])
        run = self.binding.run
        if not isinstance(run, RunId):  # an activity attempt's sandbox is never saved
            raise SandboxError("only a run's sandbox saves its files")
        ref = await blobs.put(self.binding.tenant, run, BlobKind.SANDBOX_FILES,
                              f"sandbox-{run}", data)
        return SavedFiles(ref, len(data), (time.perf_counter() - started) * 1000)

    async def restore_files(self, blobs: BlobStore, ref: str) -> int:
        data = await blobs.get(self.binding.tenant, ref)
        reply = await self._request("restore", timeout=120.0,
                                    tar=base64.b64encode(data).decode())
        self.restored_from = ref
        return int(reply["files"])

    # -- life --------------------------------------------------------------------------

    async def destroy(self) -> None:
        self.destroyed = True
        await self.instance.destroy()

    async def _request(
        self, op: str, *, timeout: float = 30.0, **fields: Any,  # noqa: ASYNC109 - the op's
    ) -> dict[str, Any]:
        if self.destroyed:
            raise SandboxLost("this sandbox was destroyed; it serves no further request")
        started = time.perf_counter()
        try:
            return await self.instance.channel.request(op, timeout=timeout, **fields)
        except SandboxLost:
            await self.destroy()
            raise
        finally:
            self.busy_ms += (time.perf_counter() - started) * 1000


class SandboxDriver(Protocol):
    """What the platform uses: create (bound), then the sandbox's own methods."""

    backend: str

    async def create(self, binding: Binding, limits: Limits) -> Sandbox: ...

    async def close(self) -> None: ...
