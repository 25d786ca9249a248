"""The built-in tools (docs/how-to/sandboxes.md): code execution, files and a browser, each in
the calling run's own sandbox. The tool gateway routes them here after its allow-list and
approval checks, and caps and fences their output like any tool's.

The browser (ADR 0033) runs in the sandbox too, never on a worker: its traffic leaves only
through the sandbox's egress relay and the host's proxy, under the agent's
``sandbox.egress``. An agent that lists any ``browser_*`` tool gets browser sandboxes (their
own image variant on microvm, more memory); on bwrap, which shares the host's kernel, the
browser is refused unless the operator allows development backends for it."""

from __future__ import annotations

import base64
import time
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import orjson

from tenantry.agents.spec import SandboxPolicy
from tenantry.blobs import BlobKind, BlobQuotaExceeded
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
_URL = {"type": "string", "minLength": 1, "maxLength": 2048,
        "description": "An http or https URL."}
_SELECTOR = {"type": "string", "minLength": 1, "maxLength": 1024,
             "description": "A CSS selector."}
BROWSER_DEFINITIONS: dict[str, tuple[str, dict[str, Any]]] = {
    "browser_open": (
        "Open a web page in this run's browser (only hosts this agent may reach). Returns "
        "the final URL, HTTP status, title and the page's readable text. Cookies and the "
        "open page persist between calls of this run.",
        {"type": "object", "properties": {"url": _URL}, "required": ["url"],
         "additionalProperties": False}),
    "browser_click": (
        "Click an element of the open page, found by CSS selector or by its visible text "
        "(give one). Returns the page after the click (it may have navigated).",
        {"type": "object", "properties": {
            "selector": _SELECTOR,
            "text": {"type": "string", "minLength": 1, "maxLength": 1024,
                     "description": "Visible text of a link or button."}},
         "additionalProperties": False}),
    "browser_type": (
        "Type text into an element of the open page (found by CSS selector); with submit, "
        "press Enter after it. Returns the page after typing.",
        {"type": "object", "properties": {
            "selector": _SELECTOR, "text": {"type": "string", "maxLength": 65536},
            "submit": {"type": "boolean", "description": "Press Enter after typing."}},
         "required": ["selector", "text"], "additionalProperties": False}),
    "browser_screenshot": (
        "Take a PNG screenshot of the open page. It is stored with the run; the result "
        "names it.",
        {"type": "object", "properties": {}, "additionalProperties": False}),
    "browser_extract": (
        "The text of every element of the open page that matches a CSS selector (up to "
        "200; a link's href when it has no text).",
        {"type": "object", "properties": {"selector": _SELECTOR}, "required": ["selector"],
         "additionalProperties": False}),
}
BROWSER_TOOLS = frozenset(BROWSER_DEFINITIONS)
DEFINITIONS.update(BROWSER_DEFINITIONS)
NAMES = frozenset(DEFINITIONS)
CODE_TOOLS = frozenset({"run_python", "run_shell"})
#: Where code finds the call's idempotency key, besides TENANTRY_IDEMPOTENCY_KEY.
KEY_ENV = "TENANTRY_IDEMPOTENCY_KEY"
KEY_FILE = "/tmp/tenantry/idempotency-key"


class Retry(StrEnum):
    """What becomes of a call a crash cut short (no ToolCompleted), by invariant 3
    (docs/reference/architecture.md): exactly once where the effect accepts a key, at most
    once otherwise."""

    #: Made again with the same key: its effects dedupe on it (a server honouring keys,
    #: an activity) or stay where a repeat rewrites them alike (the sandbox's files).
    KEYED = "keyed"
    #: Made again with the same key on a sandbox restored from the run's last save: its
    #: effects stayed in the sandbox (no egress), or its code passes the key on to hosts
    #: that honour it (``code_honours_keys``). Announced by a ToolStarted.
    FRESH_SANDBOX = "fresh_sandbox"
    #: Never made again: it may have reached outside without a key. Announced by a
    #: ToolStarted; after a crash its outcome is recorded ``unknown``.
    UNKNOWN = "unknown"


def retry_of(tool: str, sandbox: SandboxPolicy) -> Retry:
    """A built-in call's :class:`Retry`. Only the version's egress hosts let anything in
    a sandbox reach outside: with none, code and the browser (whose pages load only
    through the same proxy) act on the sandbox alone."""
    if tool not in CODE_TOOLS and tool not in BROWSER_TOOLS:
        return Retry.KEYED  # files: written or read again to the same end
    if not sandbox.egress:
        return Retry.FRESH_SANDBOX
    if tool in CODE_TOOLS and sandbox.code_honours_keys:
        return Retry.FRESH_SANDBOX
    return Retry.UNKNOWN  # a page's form, or code that does not pass the key on


@dataclass(frozen=True, slots=True)
class BrowserPolicy:
    """The operator's limits on every run's browser (config: ``TENANTRY_BROWSER_*``)."""

    page_timeout_s: float = 30.0
    max_pages: int = 50
    max_bytes: int = 50 * 1024 * 1024
    #: bwrap shares the host's kernel: a browser there is for development machines only.
    allow_dev_backends: bool = False


def uses_browser(tools: tuple[str, ...] | frozenset[str]) -> bool:
    return any(tool in BROWSER_TOOLS for tool in tools)


@dataclass(frozen=True, slots=True)
class BuiltinOutcome:
    ok: bool
    text: str
    sandbox: dict[str, Any]  # backend, id, warm, ready_ms (when created here), exec_ms
    # Egress attempts the sandbox's proxy refused during this call (and since the last
    # call), and how many more it refused than it kept.
    egress_refused: tuple[EgressRefusal, ...] = ()
    egress_dropped: int = 0
    blob_refs: tuple[str, ...] = ()  # what the call stored in the blob store (a screenshot)


class BuiltinTools:
    def __init__(self, sandboxes: SandboxManager | None,
                 browser: BrowserPolicy | None = None) -> None:
        self.sandboxes = sandboxes
        self.browser = browser or BrowserPolicy()

    def definition(self, name: str) -> dict[str, Any]:
        description, parameters = DEFINITIONS[name]
        return {"type": "function", "function": {
            "name": name, "description": description, "parameters": parameters}}

    async def call(
        self, tenant: TenantId, run: RunId, tool: str, arguments: dict[str, Any], *,
        egress: tuple[str, ...] = (), sandbox_ref: str | None = None, browser: bool = False,
        key: str | None = None, fresh_sandbox: bool = False,
    ) -> BuiltinOutcome:
        """``browser``: the run's agent may use the browser (its sandboxes are browser
        ones, whichever built-in tool comes first). ``key``: the call's idempotency key,
        given to its code. ``fresh_sandbox``: an earlier attempt of this call was cut
        short, so whatever sandbox this process holds for the run may hold its effects:
        it goes, and the call runs on one restored from ``sandbox_ref``."""
        problem = _check(tool, arguments)
        if problem is not None:
            return BuiltinOutcome(False, problem, {})
        if self.sandboxes is None:
            return BuiltinOutcome(False, "code execution is not available on this platform: "
                                  "no sandbox backend is configured", {})
        browser = browser or tool in BROWSER_TOOLS
        refusal = self._browser_refusal() if browser else None
        if refusal is not None and tool in BROWSER_TOOLS:
            return BuiltinOutcome(False, refusal, {"backend": self.sandboxes.backend})
        if fresh_sandbox:
            await self.sandboxes.drop(tenant, run)
        try:
            # Where the browser is refused, the agent's code tools still get a sandbox.
            sandbox, created = await self.sandboxes.for_run(
                tenant, run, egress=egress, restore_ref=sandbox_ref,
                browser=browser and refusal is None)
        except SandboxError as exc:
            return BuiltinOutcome(False, f"no sandbox could be started: {exc.detail}",
                                  {"backend": self.sandboxes.backend})
        info: dict[str, Any] = {"backend": sandbox.backend, "id": sandbox.id}
        if created:
            info.update(warm=sandbox.warm, ready_ms=round(sandbox.ready_ms, 3))
            if sandbox.restored_from:
                info["restored_from"] = sandbox.restored_from
        if fresh_sandbox:
            info["restarted"] = True  # files written since the last save are not there
        started = time.perf_counter()
        stored: tuple[str, ...] = ()
        try:
            if tool in BROWSER_TOOLS:
                ok, text, stored = await self._browse(tenant, run, sandbox, tool, arguments,
                                                      info)
            else:
                ok, text = await _carry_out(sandbox, tool, arguments, key)
        except SandboxError as exc:
            ok, text = False, _failure(exc)
            if not sandbox.alive:
                await self.sandboxes.drop(tenant, run)
        info["exec_ms"] = round((time.perf_counter() - started) * 1000, 3)
        refused, dropped = self._egress_refusals(tenant, run)
        if refused and tool in BROWSER_TOOLS:
            # What the page tried to reach and was refused (a redirect inside, a host off
            # the list): the model is told, as code sees its proxy's 403.
            text = _with_blocked(text, refused)
        return BuiltinOutcome(ok, text, info, tuple(refused), dropped, stored)

    def _browser_refusal(self) -> str | None:
        assert self.sandboxes is not None
        if self.sandboxes.browser_driver is None:
            return "the browser is not available on this platform (no browser sandbox)"
        if self.sandboxes.backend == "bwrap" and not self.browser.allow_dev_backends:
            return ("the browser is not available on this platform: its sandbox backend "
                    "(bwrap) shares the host's kernel; an operator may allow it on a "
                    "development machine with TENANTRY_BROWSER_DEV_BACKENDS=1")
        return None

    async def _browse(self, tenant: TenantId, run: RunId, sandbox: Sandbox, tool: str,
                      arguments: dict[str, Any], info: dict[str, Any]
                      ) -> tuple[bool, str, tuple[str, ...]]:
        """(ok, what the model reads, blobs stored)."""
        if tool == "browser_open" and not arguments["url"].lower().startswith(
                ("http://", "https://")):
            return False, "only http and https pages may be opened", ()
        policy = self.browser
        action = tool.removeprefix("browser_")
        fields: dict[str, Any] = dict(arguments)
        if action in ("open", "click", "type"):
            fields.update(max_pages=policy.max_pages, max_bytes=policy.max_bytes)
        reply = await sandbox.browser(action, timeout_s=policy.page_timeout_s, **fields)
        if reply.started_ms is not None:
            info["browser_start_ms"] = reply.started_ms
        if reply.refused is not None:
            return False, reply.refused, ()
        if reply.failed is not None:
            return False, f"the browser failed: {reply.failed}", ()
        result = dict(reply.result or {})
        if action != "screenshot":
            return True, orjson.dumps(result).decode(), ()
        assert self.sandboxes is not None
        png = base64.b64decode(str(result.pop("png", "")))
        try:
            ref = await self.sandboxes.blobs.put(tenant, run, BlobKind.SCREENSHOT,
                                                 f"screenshot-{run}", png)
        except BlobQuotaExceeded as exc:
            return False, f"the screenshot was not kept: {exc.detail}", ()
        result = {"screenshot": ref, "bytes": len(png), "content_type": "image/png", **result}
        return True, orjson.dumps(result).decode(), (ref,)

    def _egress_refusals(self, tenant: TenantId, run: RunId) -> tuple[list[EgressRefusal], int]:
        # The proxy answers a refusal only after noting it, so every attempt the code made
        # before this call returned is here.
        proxy = getattr(self.sandboxes.driver, "egress", None) if self.sandboxes else None
        if not isinstance(proxy, EgressProxy):
            return [], 0
        return proxy.take_refusals(tenant.value, str(run))


async def _carry_out(sandbox: Sandbox, tool: str, arguments: dict[str, Any],
                     key: str | None) -> tuple[bool, str]:
    match tool:
        case "run_python":
            return True, _exec_text(await sandbox.run_python(
                arguments["code"], timeout_s=arguments.get("timeout_s"), idempotency_key=key))
        case "run_shell":
            return True, _exec_text(await sandbox.run_shell(
                arguments["command"], timeout_s=arguments.get("timeout_s"),
                idempotency_key=key))
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


def _with_blocked(text: str, refused: list[EgressRefusal]) -> str:
    blocked = [{"host": r.host, "port": r.port, "reason": r.reason_code} for r in refused]
    try:
        body = orjson.loads(text)
    except orjson.JSONDecodeError:
        body = None
    if isinstance(body, dict):
        body["blocked"] = blocked
        return orjson.dumps(body).decode()
    return f"{text}\n[the sandbox's proxy refused: {orjson.dumps(blocked).decode()}]"


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
        if spec["type"] == "boolean" and not isinstance(value, bool):
            return f"{tool}: {name!r} must be true or false"
        if spec["type"] == "string" and value == "" and spec.get("minLength"):
            return f"{tool}: {name!r} must not be empty"
        if spec["type"] == "string" and len(value) > spec.get("maxLength", 1 << 30):
            return f"{tool}: {name!r} is longer than {spec['maxLength']} characters"
    if tool == "browser_click" and ("selector" in arguments) == ("text" in arguments):
        return "browser_click needs exactly one of 'selector' or 'text'"
    return None
