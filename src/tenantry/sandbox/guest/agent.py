"""The guest agent: runs inside every sandbox (microVM guest, gVisor, bubblewrap) and
carries out the host's requests — run code, read and write files, save and restore the work
directory, take fresh entropy. Standard library only: it is copied into the guest image and
runs on the guest's own Python.

Protocol (host side: ``tenantry.sandbox.channel``): one JSON object per line. The agent's
first line is ``{"ready": true, ...}``; each request ``{"id": n, "op": ...}`` gets exactly one
reply ``{"id": n, "ok": true, ...}`` or ``{"id": n, "ok": false, "error": ...}``. One
request at a time, in order.

Executions run in a child process: its own session, the sandbox user (when the agent is
root), a process cap, and a kill switch. Exit 124 means the timeout struck, 128+N that a
signal N ended it (137: SIGKILL, which is what the OOM killer sends). Processes an execution
started end with it: nothing keeps running between steps but files.
"""

from __future__ import annotations

import argparse
import base64
import builtins
import contextlib
import io
import json
import os
import random
import resource
import selectors
import shutil
import signal
import stat
import sys
import time
import traceback
from collections.abc import Callable
from typing import Any, BinaryIO

PROTOCOL = 1
EXIT_TIMEOUT = 124
MAX_OUTPUT_DEFAULT = 256 * 1024
DRAIN_SECONDS = 0.2  # output still arriving after the execution ended (grandchildren)
RNDRESEEDCRNG = 0x5207  # <linux/random.h>: reseed the kernel's CRNG from its input pool
BROWSER_UID = 1001  # the browser's own user where the agent is root (the microVM image)
#: Where an execution finds its tool call's idempotency key (also TENANTRY_IDEMPOTENCY_KEY).
KEY_FILE = "/tmp/tenantry/idempotency-key"


def _sibling(name: str, *, required: bool = True) -> Any:
    """``<name>.py``, beside this file in every sandbox, loaded once (``python3 -I`` puts
    no script directory on ``sys.path``); None for a missing optional one."""
    module = sys.modules.get(f"tenantry_guest_{name}")
    if module is None:
        import importlib.util

        path = os.path.join(os.path.dirname(os.path.abspath(__file__)), f"{name}.py")
        spec = importlib.util.spec_from_file_location(f"tenantry_guest_{name}", path)
        if spec is None or spec.loader is None or not os.path.exists(path):
            if required:
                raise ImportError(f"the guest agent needs {path}")
            return None
        module = importlib.util.module_from_spec(spec)
        sys.modules[f"tenantry_guest_{name}"] = module
        before, sys.dont_write_bytecode = sys.dont_write_bytecode, True  # no __pycache__
        try:
            spec.loader.exec_module(module)
        finally:
            sys.dont_write_bytecode = before
    return module


def _files() -> Any:
    """``files.py``: the work directory's requests, and :class:`Refused` (a request the
    agent will not carry out; the message goes back to the host)."""
    return _sibling("files")


Refused: Any = _files().Refused


class Agent:
    def __init__(self, workdir: str, uid: int | None, nproc: int | None) -> None:
        self.workdir = os.path.realpath(workdir)
        self.uid = uid if uid is not None and os.getuid() == 0 else None
        self.nproc = nproc
        self.env: dict[str, str] = {}
        self.labels: dict[str, str] = {}
        self.browser: Any = None  # browser.Browser, started by the first browser request

    # -- requests ----------------------------------------------------------------------

    def handle(self, request: dict[str, Any]) -> dict[str, Any]:
        op = request.get("op")
        files, work, uid = _files(), self.workdir, self.uid  # the work directory's: files.py
        handler: Callable[[dict[str, Any]], dict[str, Any]] | None = {
            "ping": self.op_ping, "bind": self.op_bind, "seed": self.op_seed, "exec": self.op_exec,
            "write": lambda r: files.write(work, uid, r), "read": lambda r: files.read(work, r),
            "list": lambda r: files.listing(work, r), "save": lambda r: files.save(work),
            "restore": lambda r: files.restore(work, uid, r), "browser": self.op_browser,
        }.get(str(op))
        if handler is None:
            raise Refused(f"unknown op {op!r}")
        return handler(request)

    def op_ping(self, request: dict[str, Any]) -> dict[str, Any]:
        return {"pid": os.getpid()}

    def op_bind(self, request: dict[str, Any]) -> dict[str, Any]:
        """Labels (for the guest's own diagnostics) and the environment every later
        execution starts with (e.g. the egress proxy's address)."""
        self.labels = {str(k): str(v) for k, v in dict(request.get("labels") or {}).items()}
        self.env = {str(k): str(v) for k, v in dict(request.get("env") or {}).items()}
        return {}

    def op_seed(self, request: dict[str, Any]) -> dict[str, Any]:
        """Mix fresh host entropy into the kernel's pool and, where allowed, reseed its
        CRNG at once, and set the clock: clones restored from one snapshot otherwise share
        its random state and its time."""
        entropy = base64.b64decode(str(request.get("entropy", "")))
        if len(entropy) < 32:
            raise Refused("seed needs at least 32 bytes of entropy")
        reseeded = False
        fd = os.open("/dev/urandom", os.O_WRONLY)
        try:
            os.write(fd, entropy)
            try:
                import fcntl

                fcntl.ioctl(fd, RNDRESEEDCRNG)
                reseeded = True
            except OSError:
                pass  # unprivileged or not a Linux kernel: mixed in, reseeded on schedule
        finally:
            os.close(fd)
        random.seed(entropy)
        # A clone wakes with its template's clock (saved minutes or days ago): take the
        # host's. Only root may set it (the microVM agent); elsewhere the host's kernel
        # clock is the sandbox's clock already.
        clock_set = False
        if "time_ns" in request and os.getuid() == 0:
            try:
                time.clock_settime_ns(time.CLOCK_REALTIME, int(request["time_ns"]))
                clock_set = True
            except (OSError, ValueError):
                pass
        return {"reseeded": reseeded, "clock_set": clock_set}

    def op_exec(self, request: dict[str, Any]) -> dict[str, Any]:
        timeout = float(request.get("timeout_s", 60.0))
        cap = int(request.get("max_output", MAX_OUTPUT_DEFAULT))
        stdin = str(request.get("stdin") or "").encode()
        if "python" in request:
            target: tuple[str, Any] = ("python", str(request["python"]))
        elif "shell" in request:
            target = ("argv", ["/bin/sh", "-c", str(request["shell"])])
        elif isinstance(request.get("argv"), list) and request["argv"]:
            target = ("argv", [str(a) for a in request["argv"]])
        else:
            raise Refused("exec needs python, shell or argv")
        env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": self.workdir,
               "LANG": "C.UTF-8", "TMPDIR": "/tmp", **self.env}
        env.update({str(k): str(v) for k, v in dict(request.get("env") or {}).items()})
        key = request.get("idempotency_key")
        if isinstance(key, str):
            env["TENANTRY_IDEMPOTENCY_KEY"] = key
            self._write_key(key)
        return self._run(target, env, stdin, timeout, cap)

    def _write_key(self, key: str) -> None:
        """The call's key in ``KEY_FILE`` too, for code that reads files rather than its
        environment: written anew for every execution, readable by the code's user. The
        folder must be the agent's own: code (another user where the agent is root) may
        have put a link or a folder of its own there, to have the agent write elsewhere."""
        folder = os.path.dirname(KEY_FILE)
        try:
            found = os.lstat(folder)
        except FileNotFoundError:
            found = None
        if found is not None and (not stat.S_ISDIR(found.st_mode)
                                  or found.st_uid != os.getuid()):
            if stat.S_ISDIR(found.st_mode):
                shutil.rmtree(folder)
            else:
                os.unlink(folder)
            found = None
        if found is None:
            os.mkdir(folder, 0o755)
        partial = f"{KEY_FILE}.{os.getpid()}"
        with contextlib.suppress(FileNotFoundError):
            os.unlink(partial)
        fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(key)
        os.replace(partial, KEY_FILE)

    def op_browser(self, request: dict[str, Any]) -> dict[str, Any]:
        """One browser action (``browser.py``). The browser starts on the first and lives
        as long as the sandbox. The reply is ``{"result": …}``, ``{"refused": why}`` (the
        model's to fix) or ``{"failed": why}`` (the browser is closed; the next request
        starts a fresh one)."""
        module = _browser_module()
        timeout = float(request.get("timeout_s", 30.0))
        limits = {"max_pages": int(request.get("max_pages", 50)),
                  "max_bytes": int(request.get("max_bytes", 50 << 20))}
        action = str(request.get("action"))
        started_ms = None
        try:
            if self.browser is None or not self.browser.alive:
                if self.browser is not None:
                    self.browser.close()
                # As root (the microVM), the browser runs as its own user: the sweep after
                # each execution kills every process of the sandbox user, not the browser.
                self.browser = module.Browser(uid=BROWSER_UID if self.uid is not None else None)
                started_ms = round(self.browser.start(float(request.get("start_timeout_s",
                                                                        60.0))) * 1000, 1)
            browser = self.browser
            if action == "open":
                result = browser.open(str(request.get("url", "")), timeout=timeout, **limits)
            elif action == "click":
                result = browser.click(request.get("selector"), request.get("text"),
                                       timeout=timeout, **limits)
            elif action == "type":
                result = browser.type(str(request.get("selector", "")),
                                      str(request.get("text", "")),
                                      submit=bool(request.get("submit")), timeout=timeout,
                                      **limits)
            elif action == "screenshot":
                result = browser.screenshot(timeout=timeout)
            elif action == "extract":
                result = browser.extract(str(request.get("selector", "")), timeout=timeout)
            else:
                raise Refused(f"unknown browser action {action!r}")
        except module.BrowserRefused as exc:
            return {"refused": str(exc), "started_ms": started_ms}
        except module.BrowserFailed as exc:
            self.browser.close()
            self.browser = None
            return {"failed": str(exc), "started_ms": started_ms}
        return {"result": result, "started_ms": started_ms}

    # -- executions --------------------------------------------------------------------

    def _run(self, target: tuple[str, Any], env: dict[str, str], stdin: bytes,
             timeout: float, cap: int) -> dict[str, Any]:
        started = time.monotonic()
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        in_r, in_w = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: never returns
            self._child(target, env, in_r, out_w, err_w)
        for fd in (out_w, err_w, in_r):
            os.close(fd)
        with contextlib.suppress(OSError):  # the code may not read its input at all
            os.write(in_w, stdin[:65536])
        os.close(in_w)
        outputs = {out_r: bytearray(), err_r: bytearray()}
        truncated = False
        status: int | None = None
        timed_out = False
        selector = selectors.DefaultSelector()
        for fd in outputs:
            os.set_blocking(fd, False)
            selector.register(fd, selectors.EVENT_READ)
        try:  # readable when the child exits: no polling where the kernel has it
            pidfd = os.pidfd_open(pid)
            selector.register(pidfd, selectors.EVENT_READ)
            exited: int | None = pidfd
        except (AttributeError, OSError):
            exited = None
        deadline = started + timeout
        drain_until = deadline
        while True:
            if status is None:
                done, raw = os.waitpid(pid, os.WNOHANG)
                if done:
                    status = raw
                    drain_until = time.monotonic() + DRAIN_SECONDS
                    if exited is not None:
                        selector.unregister(exited)
                        os.close(exited)
                        exited = None
            now = time.monotonic()
            if status is None and now >= deadline:
                self._kill(pid)
                _, status = os.waitpid(pid, 0)
                timed_out = True
                break
            if len(selector.get_map()) == (0 if exited is None else 1) and status is not None:
                break  # both pipes closed and the child reaped
            if now >= drain_until:
                break
            wait = min(deadline, drain_until) - now
            if status is None and exited is None:
                wait = min(wait, 0.01)
            for key, _ in selector.select(max(wait, 0.0)):
                fd = key.fd
                if fd == exited:
                    continue  # the loop's waitpid reaps it
                try:
                    chunk = os.read(fd, 65536)
                except BlockingIOError:
                    continue
                if not chunk:
                    selector.unregister(fd)
                    continue
                room = cap - len(outputs[fd])
                if room > 0:
                    outputs[fd] += chunk[:room]
                truncated = truncated or len(chunk) > room
        if exited is not None:
            os.close(exited)
        if status is None:  # both pipes closed before the child was reaped
            _, status = os.waitpid(pid, 0)
        self._kill(pid)  # what the execution left running ends with it
        selector.close()
        for fd in outputs:
            os.close(fd)
        if timed_out:
            code = EXIT_TIMEOUT
        elif os.WIFSIGNALED(status):
            code = 128 + os.WTERMSIG(status)
        else:
            code = os.WEXITSTATUS(status)
        return {"exit_code": code,
                "stdout": outputs[out_r].decode(errors="replace"),
                "stderr": outputs[err_r].decode(errors="replace"),
                "duration_ms": round((time.monotonic() - started) * 1000, 3),
                "truncated": truncated}

    def _child(self, target: tuple[str, Any], env: dict[str, str], stdin: int, stdout: int,
               stderr: int) -> None:
        try:
            os.setsid()
            os.dup2(stdin, 0)
            os.dup2(stdout, 1)
            os.dup2(stderr, 2)
            os.closerange(3, 65536)
            for sig in (signal.SIGPIPE, signal.SIGXFSZ, signal.SIGINT, signal.SIGTERM,
                        signal.SIGCHLD):
                signal.signal(sig, signal.SIG_DFL)
            try:  # the OOM killer takes the execution, never the agent
                with open("/proc/self/oom_score_adj", "w") as f:
                    f.write("1000")
            except OSError:
                pass
            resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
            if self.uid is not None:
                os.setgroups([])
                os.setgid(self.uid)
                os.setuid(self.uid)
            if self.nproc is not None:
                resource.setrlimit(resource.RLIMIT_NPROC, (self.nproc, self.nproc))
            os.chdir(self.workdir)
            kind, what = target
            if kind == "argv":
                os.execvpe(what[0], what, env)
            os.environ.clear()
            os.environ.update(env)
            # Fresh stream objects over the new 0/1/2 (the agent's own were elsewhere).
            sys.stdin = io.TextIOWrapper(io.FileIO(0, "r", closefd=False))
            sys.stdout = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), write_through=True)
            sys.stderr = io.TextIOWrapper(io.FileIO(2, "w", closefd=False), write_through=True)
            sys.argv = ["-c"]
            sys.path.insert(0, self.workdir)  # like `python -c`: modules beside the code
            random.seed()  # fresh from the (reseeded) kernel, whatever the agent held
            code = 0
            try:
                exec(compile(what, "<run_python>", "exec"),
                     {"__name__": "__main__", "__builtins__": builtins})
            except SystemExit as exit_:
                code = exit_.code if isinstance(exit_.code, int) else (
                    0 if exit_.code is None else 1)
                if not isinstance(exit_.code, int | None):
                    print(exit_.code, file=sys.stderr)
            except BaseException as error:
                # The model sees its own code's frames, not the agent's.
                trace = error.__traceback__
                traceback.print_exception(type(error), error,
                                          trace.tb_next if trace is not None else None)
                code = 1
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
        except BaseException as exc:
            try:
                os.write(2, f"could not start: {exc}\n".encode())
            finally:
                os._exit(127)

    def _kill(self, pid: int) -> None:
        """Kill the execution's session and, as root, every process of the sandbox user
        (a fork bomb's children may have left the session)."""
        with contextlib.suppress(OSError):
            os.killpg(pid, signal.SIGKILL)
        if self.uid is None:
            return
        killer = os.fork()
        if killer == 0:
            try:
                os.setuid(self.uid)
                os.kill(-1, signal.SIGKILL)  # as that user: reaches only its processes
            finally:
                os._exit(0)
        os.waitpid(killer, 0)

def _browser_module() -> Any:
    """``browser.py``, loaded on first use; from then on no __pycache__ in the work dir."""
    module = _sibling("browser", required=False)
    if module is None:
        raise Refused("this sandbox has no browser driver (browser.py)")
    sys.dont_write_bytecode = True
    return module


def _open_channel(path: str | None) -> tuple[BinaryIO, int]:
    """The channel as (buffered reader, write fd). On stdio, the real stdin/stdout move to
    new descriptors and 0/1 point at /dev/null, so a stray print cannot corrupt it."""
    if path:
        fd = os.open(path, os.O_RDWR)
        return os.fdopen(os.dup(fd), "rb"), fd
    reader = os.dup(0)
    writer = os.dup(1)
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    os.close(null)
    return os.fdopen(reader, "rb"), writer


def _not_dumpable() -> None:
    """Where code runs as the agent's own user (bwrap, gVisor), it could otherwise open
    /proc/<agent>/fd and write on the channel; a non-dumpable process's /proc entries
    belong to root. (Executions exec'd from it become dumpable again: they are theirs.)"""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE, 0
    except (ImportError, OSError, AttributeError):
        pass  # no ctypes in a minimal guest: there the agent runs as root anyway


def _send(fd: int, message: dict[str, Any]) -> None:
    data = json.dumps(message, separators=(",", ":")).encode() + b"\n"
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Tenantry guest agent")
    parser.add_argument("--channel", help="character device to talk on (default: stdio)")
    parser.add_argument("--workdir", default="/work")
    parser.add_argument("--uid", type=int, help="run executions as this user (when root)")
    parser.add_argument("--nproc", type=int, help="process cap for the execution's user")
    args = parser.parse_args(argv)
    try:  # the agent outlives what it runs
        with open("/proc/self/oom_score_adj", "w") as f:
            f.write("-1000")
    except OSError:
        pass
    _not_dumpable()
    agent = Agent(args.workdir, args.uid, args.nproc)
    reader, writer = _open_channel(args.channel)
    _send(writer, {"ready": True, "agent": PROTOCOL, "pid": os.getpid(), "uid": os.getuid(),
                   "python": sys.version.split()[0]})
    for line in reader:
        if not line.strip():
            continue
        try:
            request = json.loads(line)
            if not isinstance(request, dict):
                continue
        except ValueError:
            continue
        reply: dict[str, Any]
        try:
            reply = {"id": request.get("id"), "ok": True, **agent.handle(request)}
        except Refused as exc:
            reply = {"id": request.get("id"), "ok": False, "error": str(exc)}
        except Exception as exc:  # the agent reports, never dies, on a bad request
            reply = {"id": request.get("id"), "ok": False,
                     "error": f"{type(exc).__name__}: {exc}"}
        _send(writer, reply)


if __name__ == "__main__":
    main()
