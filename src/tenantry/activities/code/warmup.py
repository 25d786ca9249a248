"""Warming a pooled sandbox for activity attempts (ADR 0012 §7).

A clone of the microVM template runs every code path for the first time: under software
CPU emulation QEMU translates that guest code anew in each clone, and each page it touches
is a copy-on-write fault. The pool already warms the claim's own requests (seed, bind, an
empty execution); an attempt then still paid for writing files, the runner, an import, a
result file — hundreds of ms on microvm. This runs that same sequence once on every
pooled sandbox, before it is paused and before any binding (no tenant's data; no secret),
and removes what it wrote: the attempt that claims it finds the work directory as it was.
The sandbox is still used for one attempt only.
"""

from __future__ import annotations

import base64

import orjson

from tenantry.activities.code.attempt import MAX_OUTPUT_BYTES, RUNNER
from tenantry.sandbox import SandboxError
from tenantry.sandbox.channel import AgentChannel

ENTRY = b"def handle(value, context):\n    return value\n"
#: Written by the warm-up and gone after it (the runner's files and the bytecode cache).
LEFT = ("bundle", "input.json", "result.json")
CLEAN = ("import os, shutil\n"
         "shutil.rmtree('bundle', ignore_errors=True)\n"
         "for name in ('input.json', 'result.json'):\n"
         "    if os.path.lexists(name):\n"
         "        os.remove(name)\n")


def _data(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


async def warm_attempt_path(channel: AgentChannel) -> None:
    """The attempt's requests on a trivial activity (its files on the runner's stdin, as
    ``attempt._deliver`` sends a small bundle), then the work directory cleaned."""
    spec = {"secrets": {}, "key": "warm-up", "task_id": "warm-up", "attempt": 1,
            "activity": "warm-up", "version": 1, "entrypoint": "main.py:handle",
            "heartbeat_timeout_s": None,
            "files": {"bundle/main.py": _data(ENTRY), "input.json": _data(b'{"warm":true}')}}
    reply = await channel.request("exec", timeout=40.0, python=RUNNER, timeout_s=30,
                                  max_output=MAX_OUTPUT_BYTES,
                                  stdin=orjson.dumps(spec).decode() + "\n")
    if reply.get("exit_code") != 0:
        raise SandboxError(f"the activity warm-up failed: exit {reply.get('exit_code')}: "
                           f"{str(reply.get('stderr'))[-300:]}")
    await channel.request("read", path="result.json", max_bytes=1024)
    cleaned = await channel.request("exec", python=CLEAN, timeout_s=30)
    entries = await channel.request("list", path=".")
    left = sorted(e["name"] for e in entries["entries"] if e["name"] in LEFT)
    if cleaned.get("exit_code") != 0 or left:
        raise SandboxError(f"the activity warm-up left {left} behind")
