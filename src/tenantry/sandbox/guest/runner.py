"""The guest runner of one activity attempt (``tenantry.activities.code.attempt``). Standard
library only. The host sends this file's text as one ``exec`` (python) to the guest agent,
so it runs in the agent's forked child as the sandbox user, in the work directory: it is
not part of the image, and nothing of it is a file tenant code could change first.

The host passes the attempt's spec as ONE JSON line on stdin — the scoped secrets, the
idempotency key, the entrypoint, the heartbeat timeout, and (when they fit in the line)
the bundle's files and ``input.json``, which the runner writes first. Stdin is a pipe that only this
process reads, so the secrets never touch a file (there is no secrets file to shred): the
runner reads it to the end and moves the secrets into ``os.environ`` before it imports a
line of tenant code. Then it imports the entrypoint from ``bundle/``, calls
``function(input, context)`` with ``input.json``'s value, and writes the JSON result to
``result.json``. An exception: its traceback (the tenant's frames) on stderr, exit 1;
``sys.exit(n)``: exit n.

Silence: with a heartbeat timeout, a kernel interval timer (``SIGALRM``, default action:
the process dies, exit 142) is armed before the import and re-armed by each
``context.heartbeat()``. The kernel, not Python, enforces it: code stuck in C or holding
the GIL dies all the same."""

from __future__ import annotations

import base64
import importlib
import json
import os
import signal
import sys
import traceback
from typing import Any

BUNDLE_DIR = "bundle"
INPUT_FILE = "input.json"
RESULT_FILE = "result.json"
KEY_VARIABLE = "ACTIVITY_IDEMPOTENCY_KEY"


class Context:
    """What the entrypoint gets beside its input."""

    __slots__ = ("activity", "attempt", "heartbeat_timeout_s", "idempotency_key", "task_id",
                 "version")

    def __init__(self, spec: dict[str, Any]) -> None:
        self.task_id = str(spec["task_id"])
        self.attempt = int(spec["attempt"])
        self.activity = str(spec["activity"])
        self.version = int(spec["version"])
        self.idempotency_key = str(spec["key"])
        timeout = spec.get("heartbeat_timeout_s")
        self.heartbeat_timeout_s = float(timeout) if timeout else None

    def heartbeat(self) -> None:
        """I am alive: the attempt may stay silent for another heartbeat timeout."""
        if self.heartbeat_timeout_s is not None:
            signal.setitimer(signal.ITIMER_REAL, self.heartbeat_timeout_s)


def _entry(entrypoint: str) -> Any:
    path, _, function = entrypoint.partition(":")
    module = importlib.import_module(path[: -len(".py")].replace("/", "."))
    return getattr(module, function)


def _unpack(files: dict[str, str]) -> None:
    """The bundle and the input, when the host sent them with the spec (one round trip
    to the guest instead of one per file): written where the host would have put them."""
    for path, data in files.items():
        folder = os.path.dirname(path)
        if folder:
            os.makedirs(folder, exist_ok=True)
        with open(path, "wb") as f:
            f.write(base64.b64decode(data))


def main() -> None:
    spec = json.loads(sys.stdin.readline())
    sys.stdin.read()  # to the end: nothing of the spec stays in the pipe for tenant code
    _unpack(dict(spec.pop("files", None) or {}))
    os.environ.update({str(k): str(v) for k, v in dict(spec.pop("secrets")).items()})
    os.environ[KEY_VARIABLE] = str(spec["key"])
    context = Context(spec)
    sys.path[:] = [os.path.abspath(BUNDLE_DIR), *[p for p in sys.path if p != os.getcwd()]]
    # No bytecode cache: the sandbox imports its bundle once and is then destroyed, so a
    # .pyc would be written (a file, under emulation a slow one) and never read (`-B`).
    sys.dont_write_bytecode = True
    signal.signal(signal.SIGALRM, signal.SIG_DFL)
    context.heartbeat()
    try:
        with open(INPUT_FILE, "rb") as f:
            value = json.load(f)
        result = _entry(str(spec["entrypoint"]))(value, context)
    except SystemExit:
        raise
    except BaseException as error:
        trace = error.__traceback__
        # The tenant sees its own frames, not the runner's.
        traceback.print_exception(type(error), error, trace.tb_next if trace else None)
        sys.stderr.flush()
        os._exit(1)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
    try:
        data = json.dumps(result, allow_nan=False, separators=(",", ":"))
    except (TypeError, ValueError) as error:
        # No result file: the host reports invalid_result with this line.
        print(f"the entrypoint's result is not JSON: {error}", file=sys.stderr)
        return
    with open(RESULT_FILE, "w", encoding="utf-8") as f:
        f.write(data)


if __name__ == "__main__":
    main()
