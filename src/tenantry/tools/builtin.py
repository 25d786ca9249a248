"""The built-in tools (DESIGN §9, §10): code execution and files, each in the calling
run's own sandbox. The tool gateway routes them here after its allow-list and approval
checks, and caps and fences their output like any tool's."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import orjson

from tenantry.ids import RunId, TenantId
from tenantry.sandbox.egress import EgressProxy, EgressRefusal
from tenantry.sandbox.manager import SandboxManager
from tenantry.sandbox.sandbox import Sandbox
from tenantry.sandbox.types import EXIT_KILLED, EXIT_TIMEOUT, ExecResult, SandboxError

_TIMEOUT = {"type": "number", "minimum": 1,
            "description": "Seconds before the execution is stopped (exit 124)."}
_PATH = {"type": "string", "minLength": 1, "maxLength": 1024,
         "description": "Path relative to the sandbox's work directory."}

DEFINITIONS: dict[str, tuple[str, dict[str, Any]]] = {
    "run_python": (
        "Run Python 3 code in this run's sandbox (no network; files persist between "
        "calls). Returns exit_code, stdout and stderr.",
        {"type": "object", "properties": {"code": {"type": "string", "minLength": 1},
                                          "timeout_s": _TIMEOUT},
         "required": ["code"], "additionalProperties": False}),
    "run_shell": (
        "Run a shell command in this run's sandbox (no network; files persist between "
        "calls). Returns exit_code, stdout and stderr.",
        {"type": "object", "properties": {"command": {"type": "string", "minLength": 1},
                                          "timeout_s": _TIMEOUT},
         "required": ["command"], "additionalProperties": False}),
    "write_file": (
        "Write a text file in this run's sandbox, creating folders as needed.",
        {"type": "object", "properties": {"path": _PATH, "content": {"type": "string"}},
         "required": ["path", "content"], "additionalProperties": False}),
    "read_file": (
        "Read a text file from this run's sandbox.",
        {"type": "object", "properties": {"path": _PATH},
         "required": ["path"], "additionalProperties": False}),
    "list_files": (
        "List a folder of this run's sandbox (default: the work directory).",
        {"type": "object", "properties": {"path": _PATH}, "additionalProperties": False}),
}
NAMES = frozenset(DEFINITIONS)


@dataclass(frozen=True, slots=True)
class BuiltinOutcome:
    ok: bool
    text: str
    sandbox: dict[str, Any]  # backend, id, warm, ready_ms (when created here), exec_ms
    # Egress attempts the sandbox's proxy refused during this call (and since the last
    # call), and how many more it refused than it kept.
    egress_refused: tuple[EgressRefusal, ...] = ()
    egress_dropped: int = 0


class BuiltinTools:
    def __init__(self, sandboxes: SandboxManager | None) -> None:
        self.sandboxes = sandboxes

    def definition(self, name: str) -> dict[str, Any]:
        description, parameters = DEFINITIONS[name]
        return {"type": "function", "function": {
            "name": name, "description": description, "parameters": parameters}}

    async def call(
        self, tenant: TenantId, run: RunId, tool: str, arguments: dict[str, Any], *,
        egress: tuple[str, ...] = (), sandbox_ref: str | None = None,
    ) -> BuiltinOutcome:
        problem = _check(tool, arguments)
        if problem is not None:
            return BuiltinOutcome(False, problem, {})
        if self.sandboxes is None:
            return BuiltinOutcome(False, "code execution is not available on this platform: "
                                  "no sandbox backend is configured", {})
        try:
            sandbox, created = await self.sandboxes.for_run(
                tenant, run, egress=egress, restore_ref=sandbox_ref)
        except SandboxError as exc:
            return BuiltinOutcome(False, f"no sandbox could be started: {exc.detail}",
                                  {"backend": self.sandboxes.backend})
        info: dict[str, Any] = {"backend": sandbox.backend, "id": sandbox.id}
        if created:
            info.update(warm=sandbox.warm, ready_ms=round(sandbox.ready_ms, 3))
            if sandbox.restored_from:
                info["restored_from"] = sandbox.restored_from
        started = time.perf_counter()
        try:
            ok, text = await _carry_out(sandbox, tool, arguments)
        except SandboxError as exc:
            ok, text = False, _failure(exc)
            if not sandbox.alive:
                await self.sandboxes.drop(tenant, run)
        info["exec_ms"] = round((time.perf_counter() - started) * 1000, 3)
        refused, dropped = self._egress_refusals(tenant, run)
        return BuiltinOutcome(ok, text, info, tuple(refused), dropped)

    def _egress_refusals(self, tenant: TenantId, run: RunId) -> tuple[list[EgressRefusal], int]:
        # The proxy answers a refusal only after noting it, so every attempt the code made
        # before this call returned is here.
        proxy = getattr(self.sandboxes.driver, "egress", None) if self.sandboxes else None
        if not isinstance(proxy, EgressProxy):
            return [], 0
        return proxy.take_refusals(tenant.value, str(run))


async def _carry_out(sandbox: Sandbox, tool: str, arguments: dict[str, Any]) -> tuple[bool, str]:
    match tool:
        case "run_python":
            return True, _exec_text(await sandbox.run_python(
                arguments["code"], timeout_s=arguments.get("timeout_s")))
        case "run_shell":
            return True, _exec_text(await sandbox.run_shell(
                arguments["command"], timeout_s=arguments.get("timeout_s")))
        case "write_file":
            written = await sandbox.write_file(arguments["path"], arguments["content"].encode())
            return True, f"wrote {written} bytes to {arguments['path']}"
        case "read_file":
            data, size, truncated = await sandbox.read_file(arguments["path"])
            text = data.decode(errors="replace")
            if truncated:
                text += f"\n[... file is {size} bytes; only the first {len(data)} shown]"
            return True, text
        case "list_files":
            entries = await sandbox.list_files(arguments.get("path") or ".")
            return True, orjson.dumps([{"name": e.name, "kind": e.kind, "size": e.size}
                                       for e in entries]).decode()
    raise AssertionError(tool)


def _exec_text(result: ExecResult) -> str:
    """What the model reads: the exit code first, and what it means when it is ours."""
    note = {EXIT_TIMEOUT: "timed out (stopped at the time limit)",
            EXIT_KILLED: "killed (out of memory or over a limit)"}.get(result.exit_code)
    body: dict[str, Any] = {"exit_code": result.exit_code}
    if note:
        body["note"] = note
    body.update(stdout=result.stdout, stderr=result.stderr,
                duration_ms=round(result.duration_ms, 1))
    if result.truncated:
        body["output_truncated"] = True
    return orjson.dumps(body).decode()


def _failure(exc: SandboxError) -> str:
    if exc.type == "sandbox_lost":
        return (f"the sandbox stopped during this call ({exc.detail}); the next call gets a "
                "fresh sandbox with the files of the last save")
    return exc.detail


def _check(tool: str, arguments: dict[str, Any]) -> str | None:
    """The arguments' shape, checked here: a model's malformed call is its error to fix."""
    _, schema = DEFINITIONS[tool]
    properties: dict[str, Any] = schema["properties"]
    for name in schema.get("required", ()):
        if name not in arguments:
            return f"{tool} needs {name!r}"
    for name, value in arguments.items():
        spec = properties.get(name)
        if spec is None:
            return f"{tool} takes no argument {name!r}"
        if spec["type"] == "string" and not isinstance(value, str):
            return f"{tool}: {name!r} must be a string"
        if spec["type"] == "number" and (isinstance(value, bool)
                                         or not isinstance(value, int | float) or value < 1):
            return f"{tool}: {name!r} must be a number of seconds ≥ 1"
        if spec["type"] == "string" and value == "" and spec.get("minLength"):
            return f"{tool}: {name!r} must not be empty"
    return None
