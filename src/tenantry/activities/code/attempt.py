"""One attempt of a tenant's activity in a fresh sandbox, and what happened (ADR 0012).

The sandbox is claimed for this attempt alone (``Binding(tenant, AttemptId)``) and
destroyed on every path. Into it go exactly: the bundle (``bundle/``), the input
(``input.json``) and — on the runner's stdin, never in a file — the idempotency key and the
secrets the caller fetched for this activity. The guest runner (``sandbox/guest/runner.py``)
is sent as the execution's code. Nothing of the platform (task token, DSN, operator
credentials) is a parameter here, so none of it can reach the guest.

Liveness: the host calls ``heartbeat()`` every ``heartbeat_every`` seconds while the
execution is in flight and the sandbox is alive (and ``while_creating()`` while the
sandbox is being made); a guest that goes silent (its code does not call
``context.heartbeat()`` within ``heartbeat_timeout_s``) is killed by its own kernel timer
(exit 142) and the attempt is retryable; a guest that hangs whole is lost when the
agent's channel times out (the hard timeout plus the channel's grace)."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import dataclasses
import re
import signal
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from importlib import resources
from typing import Any, Literal

import orjson

from tenantry.activities.code.bundle import Bundle
from tenantry.ids import AttemptId, TenantId
from tenantry.sandbox import (
    EXIT_KILLED,
    EXIT_TIMEOUT,
    Binding,
    Limits,
    ResourceUsage,
    Sandbox,
    SandboxDriver,
    SandboxLost,
    SandboxRefused,
)

Status = Literal["completed", "retryable", "failed"]

MAX_RESULT_BYTES = 256 * 1024
MAX_INPUT_BYTES = 256 * 1024
MAX_OUTPUT_BYTES = 64 * 1024  # per stream, for the task log
#: The runner's spec travels on stdin, which the agent caps at 64 KiB.
MAX_STDIN_BYTES = 64 * 1024
MAX_SECRETS_BYTES = 32 * 1024
HEARTBEAT_EVERY_S = 5.0
#: The runner's heartbeat timer: SIGALRM's default action, reported as 128 + 14.
EXIT_SILENT = 128 + signal.SIGALRM
_SECRET_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
RUNNER = resources.files("tenantry.sandbox.guest").joinpath("runner.py").read_text()


@dataclass(frozen=True, slots=True)
class AttemptRequest:
    tenant: TenantId
    task_id: str
    attempt: int
    activity: str
    version: int
    bundle: Bundle
    input: Any  # a JSON value
    timeout_s: float
    limits: Limits = field(default_factory=Limits)
    secrets: Mapping[str, str] = field(default_factory=dict)  # only this activity's scope
    heartbeat_timeout_s: float | None = None
    egress: tuple[str, ...] = ()
    retryable_exit_codes: frozenset[int] = frozenset()
    id: AttemptId = field(default_factory=AttemptId.new)
    # The key the guest sees when the task has its own (an agent's tool call: the call's
    # key, ADR 0015); None: "{task_id}:{activity}".
    key: str | None = None

    def __post_init__(self) -> None:
        if not self.task_id or not self.activity:
            raise ValueError("an attempt needs its task id and activity name")
        if self.attempt < 1:
            raise ValueError("attempts are numbered from 1")
        if self.timeout_s <= 0:
            raise ValueError("an attempt's timeout must be positive")
        if self.heartbeat_timeout_s is not None and self.heartbeat_timeout_s <= 0:
            raise ValueError("an attempt's heartbeat timeout must be positive")
        for name, value in self.secrets.items():
            if not _SECRET_NAME.fullmatch(name):
                raise ValueError(f"secret name {name!r} is not an environment variable name")
            if not isinstance(value, str) or "\x00" in value:
                raise ValueError(f"secret {name!r}: a value is a string without NUL bytes")
        if len(orjson.dumps(dict(self.secrets))) > MAX_SECRETS_BYTES:
            raise ValueError(f"an attempt's secrets are at most {MAX_SECRETS_BYTES} bytes")
        if len(self.input_json) > MAX_INPUT_BYTES:
            raise ValueError(f"an activity's input is at most {MAX_INPUT_BYTES} bytes")

    @property
    def idempotency_key(self) -> str:
        """The same for every attempt of a task: the tenant's side effects dedupe on it."""
        return self.key if self.key is not None else f"{self.task_id}:{self.activity}"

    @property
    def input_json(self) -> bytes:
        try:
            return orjson.dumps(self.input)
        except TypeError as exc:
            raise ValueError(f"an activity's input must be JSON: {exc}") from None


@dataclass(frozen=True, slots=True)
class AttemptOutcome:
    status: Status
    result: Any  # the JSON value, when completed
    error: str | None  # "<code>: <detail>", the code stable (timeout, killed, ...)
    exit_code: int | None  # None: the sandbox was lost before an exit code
    stdout: str
    stderr: str
    duration_ms: float
    backend: str
    sandbox_id: str
    killed_sandbox: bool  # ended by a kill or a crash, not its own exit: the poison count
    #: What the attempt's sandbox used, host-measured from its claim to its destroy
    #: (ADR 0016); None: the backend cannot tell. ``sandbox_ms`` is the time it spent
    #: serving the attempt's requests (files in, the execution, the result out): the
    #: sandbox seconds billed, like a built-in tool call's exec time.
    usage: ResourceUsage | None = None
    sandbox_ms: float = 0.0

    @property
    def cpu_s(self) -> float | None:
        return None if self.usage is None else self.usage.cpu_s

    @property
    def peak_memory_bytes(self) -> int | None:
        return None if self.usage is None else self.usage.peak_memory_bytes


async def run_attempt(
    driver: SandboxDriver, request: AttemptRequest, *,
    heartbeat: Callable[[], Awaitable[None]] | None,
    heartbeat_every: float = HEARTBEAT_EVERY_S,
    on_started: Callable[[Sandbox], Awaitable[None]] | None = None,
    while_creating: Callable[[], Awaitable[None]] | None = None,
    reap: Callable[[asyncio.Future[None]], None] | None = None,
) -> AttemptOutcome:
    """Run one attempt; the sandbox is destroyed however this returns or raises. A
    ``heartbeat`` that raises (the lease is gone) ends the attempt with that exception.
    ``on_started`` is awaited with the attempt's sandbox before anything is written into
    it (the dispatcher records the attempt as started); if it raises, nothing runs.
    ``while_creating`` is awaited every ``heartbeat_every`` seconds while the sandbox is
    being made (the dispatcher renews the lease: an empty pool can outlast it); if it
    raises, the creation is abandoned and the exception ends the attempt.

    The destruction starts as soon as the guest is done, as a task of its own (so no
    cancellation stops it). Without ``reap`` this waits for it; with ``reap``, it is handed
    to that callable, which then owns waiting for it: the dispatcher records the outcome
    meanwhile and holds the attempt's slot until the sandbox is gone."""
    started = time.perf_counter()
    limits = dataclasses.replace(request.limits, timeout_s=request.timeout_s)
    sandbox = await _create(driver, Binding(request.tenant, request.id, request.egress),
                            limits, while_creating, heartbeat_every)
    try:
        if on_started is not None:
            await on_started(sandbox)
        outcome = await _attempt(sandbox, request, heartbeat, heartbeat_every, started)
        # Read once the guest is done and before the destroy starts (it may overlap the
        # outcome's record): the sandbox's cgroup — ours, gVisor's included — or QEMU's
        # process is still there to read, a sandbox lost mid-execution included (ADR 0016).
        outcome = dataclasses.replace(outcome, usage=sandbox.usage(),
                                      sandbox_ms=round(sandbox.busy_ms, 3))
    finally:
        destroying = asyncio.ensure_future(sandbox.destroy())
        if reap is None:
            # Shielded: a second cancellation must not leave the sandbox behind.
            await asyncio.shield(destroying)
        else:
            reap(destroying)
    return outcome


async def run_attempt_in(
    sandbox: Sandbox, request: AttemptRequest, *,
    heartbeat: Callable[[], Awaitable[None]] | None,
    heartbeat_every: float = HEARTBEAT_EVERY_S, started: float | None = None,
    on_started: Callable[[Sandbox], Awaitable[None]] | None = None,
) -> AttemptOutcome:
    """One attempt in a sandbox the caller owns (batching and warm state, ADR 0014): the
    caller destroys it, or scrubs it (``warm.scrub``) before another task of
    the same tenant and version. The sandbox must hold nothing of an earlier task.
    ``on_started`` as for ``run_attempt``."""
    if sandbox.binding.tenant != request.tenant:
        raise SandboxRefused("this sandbox is bound to another tenant")
    if on_started is not None:
        await on_started(sandbox)
    # A reused sandbox has served earlier tasks: its meter restarts here and its busy time
    # is counted from here, so this task's usage fact is this task's alone (ADR 0016).
    sandbox.start_metering()
    busy_before = sandbox.busy_ms
    outcome = await _attempt(sandbox, request, heartbeat, heartbeat_every,
                             time.perf_counter() if started is None else started)
    return dataclasses.replace(outcome, usage=sandbox.usage(),
                               sandbox_ms=round(sandbox.busy_ms - busy_before, 3))


async def _create(driver: SandboxDriver, binding: Binding, limits: Limits,
                  heartbeat: Callable[[], Awaitable[None]] | None, every: float) -> Sandbox:
    """The attempt's sandbox, with heartbeats while it is made: an empty pool (a cold
    start, a microVM under TCG) can take longer than the task's lease, and a lease that
    expired meanwhile would be claimed again and the attempt run twice."""
    creating = asyncio.ensure_future(driver.create(binding, limits))
    try:
        while not creating.done():
            await asyncio.wait({creating}, timeout=every)
            if not creating.done() and heartbeat is not None:
                await heartbeat()
    except BaseException:
        creating.cancel()
        with contextlib.suppress(BaseException):
            made = await creating  # finished before the cancel landed: not left behind
            await asyncio.shield(made.destroy())
        raise
    return creating.result()


async def _attempt(sandbox: Sandbox, request: AttemptRequest,
                   heartbeat: Callable[[], Awaitable[None]] | None, every: float,
                   started: float) -> AttemptOutcome:
    def outcome(status: Status, error: str | None, exit_code: int | None = None,
                stdout: str = "", stderr: str = "", result: Any = None,
                killed: bool = False) -> AttemptOutcome:
        return AttemptOutcome(status, result, error, exit_code, stdout[:MAX_OUTPUT_BYTES],
                              stderr[:MAX_OUTPUT_BYTES],
                              round((time.perf_counter() - started) * 1000, 3),
                              sandbox.backend, sandbox.id, killed)

    try:
        stdin = await _deliver(sandbox, request)
        execution = asyncio.ensure_future(sandbox.run_python(
            RUNNER, timeout_s=request.timeout_s, max_output=MAX_OUTPUT_BYTES, stdin=stdin))
        try:
            while not execution.done():
                await asyncio.wait({execution}, timeout=every)
                if not execution.done() and heartbeat is not None and sandbox.alive:
                    await heartbeat()
            done = execution.result()
        finally:
            if not execution.done():
                execution.cancel()
                with contextlib.suppress(BaseException):
                    await execution
        code = done.exit_code
        if code == 0:
            result, problem = await _read_result(sandbox)
            if problem is not None:
                return outcome("failed", f"invalid_result: {problem}", code, done.stdout,
                               done.stderr)
            return outcome("completed", None, code, done.stdout, done.stderr, result)
        status, error, killed = _classify(code, request)
        return outcome(status, error, code, done.stdout, done.stderr, killed=killed)
    except SandboxLost as exc:
        return outcome("retryable", f"sandbox_lost: {exc}", killed=True)


async def _deliver(sandbox: Sandbox, request: AttemptRequest) -> str:
    """The runner's stdin line. The bundle and input travel in it when the line stays
    under the agent's stdin cap (the runner writes them before anything else: one round
    trip to the guest for the whole attempt); otherwise they are written file by file
    first, as before."""
    spec: dict[str, Any] = {
        "secrets": dict(request.secrets), "key": request.idempotency_key,
        "task_id": request.task_id, "attempt": request.attempt, "activity": request.activity,
        "version": request.version, "entrypoint": request.bundle.entrypoint,
        "heartbeat_timeout_s": request.heartbeat_timeout_s}
    files = {f"bundle/{path}": data for path, data in request.bundle.files.items()}
    files["input.json"] = request.input_json
    inline = orjson.dumps({**spec, "files": {path: base64.b64encode(data).decode()
                                             for path, data in files.items()}})
    if len(inline) < MAX_STDIN_BYTES:
        return inline.decode() + "\n"
    for path, data in files.items():
        await sandbox.write_file(path, data)
    return orjson.dumps(spec).decode() + "\n"


def _classify(code: int, request: AttemptRequest) -> tuple[Status, str, bool]:
    if code == EXIT_TIMEOUT:
        return "retryable", f"timeout: ran past its {request.timeout_s:g} s limit", True
    if code == EXIT_KILLED:
        return "retryable", "killed: SIGKILL (out of memory, or the process limit)", True
    if code == EXIT_SILENT and request.heartbeat_timeout_s is not None:
        return ("retryable", f"heartbeat_timeout: silent for over "
                f"{request.heartbeat_timeout_s:g} s", True)
    if 128 < code <= 128 + 64:
        try:
            name = signal.Signals(code - 128).name
        except ValueError:
            name = f"signal {code - 128}"
        return "retryable", f"crashed: {name}", True
    if code in request.retryable_exit_codes:
        return "retryable", f"exit_code: {code} (listed as retryable)", False
    return "failed", f"exit_code: {code}", False


async def _read_result(sandbox: Sandbox) -> tuple[Any, str | None]:
    try:
        data, size, truncated = await sandbox.read_file("result.json",
                                                        max_bytes=MAX_RESULT_BYTES)
    except SandboxRefused:
        return None, "no result was written (the entrypoint's value is not JSON?)"
    if truncated:
        return None, f"the result is {size} bytes, over the {MAX_RESULT_BYTES} byte cap"
    try:
        return orjson.loads(data), None
    except orjson.JSONDecodeError:
        return None, "the result file is not JSON"
