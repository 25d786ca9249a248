"""The guest agent's protocol, run as a plain child process (no sandbox: what is checked here
is the agent's own behaviour — exit codes, limits on paths and output, save/restore — which
every backend then relies on; containment is tested per backend in integration)."""

from __future__ import annotations

import asyncio
import base64
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tenantry.sandbox.channel import MAX_LINE_BYTES, AgentChannel
from tenantry.sandbox.probe import AGENT_PATH
from tenantry.sandbox.types import SandboxLost, SandboxRefused
from tenantry.tools.builtin import BuiltinTools


@pytest.fixture
async def agent(tmp_path: Path) -> AsyncIterator[AgentChannel]:
    work = tmp_path / "work"
    work.mkdir()
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-I", str(AGENT_PATH), "--workdir", str(work),
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, limit=MAX_LINE_BYTES)
    assert proc.stdout is not None and proc.stdin is not None
    channel = AgentChannel(proc.stdout, proc.stdin)
    hello = await channel.wait_ready(10)
    assert hello["agent"] == 1
    yield channel
    channel.close()
    await proc.wait()


async def test_exit_codes_output_and_timeouts(agent: AgentChannel) -> None:
    ok = await agent.request("exec", python="import sys; print('out'); print('err', "
                                            "file=sys.stderr); sys.exit(3)")
    assert (ok["exit_code"], ok["stdout"], ok["stderr"]) == (3, "out\n", "err\n")
    crash = await agent.request("exec", python="1/0")
    assert crash["exit_code"] == 1 and "ZeroDivisionError" in crash["stderr"]
    assert "agent.py" not in crash["stderr"]  # the model sees its own code's traceback
    shell = await agent.request("exec", shell="echo $HOME; exit 7")
    assert shell["exit_code"] == 7 and shell["stdout"].strip().endswith("work")
    slow = await agent.request("exec", shell="sleep 30", timeout_s=1)
    assert slow["exit_code"] == 124
    killed = await agent.request("exec", shell="kill -9 $$")
    assert killed["exit_code"] == 137
    loud = await agent.request("exec", python="print('x' * 100000)", max_output=1000)
    assert len(loud["stdout"]) == 1000 and loud["truncated"] is True
    missing = await agent.request("exec", argv=["no-such-program"])
    assert missing["exit_code"] == 127


async def test_a_background_process_ends_with_its_execution(agent: AgentChannel) -> None:
    started = await agent.request("exec", shell="(sleep 60; echo late > late.txt) & echo ok")
    assert started["stdout"] == "ok\n"
    listing = await agent.request("exec", shell="ps -eo args 2>/dev/null | grep -c 'sleep 6[0]'"
                                                " || true")
    assert listing["stdout"].strip() in ("0", "")


async def test_files_stay_inside_the_work_directory(agent: AgentChannel) -> None:
    await agent.request("write", path="a/b.txt", data=base64.b64encode(b"hello").decode())
    read = await agent.request("read", path="a/b.txt")
    assert base64.b64decode(read["data"]) == b"hello" and read["size"] == 5
    listing = await agent.request("list", path="a")
    assert listing["entries"] == [{"name": "b.txt", "kind": "file", "size": 5}]
    for bad in ("../outside.txt", "/etc/passwd", "a/../../x", ""):
        with pytest.raises(SandboxRefused):
            await agent.request("read", path=bad)
    # A link the code made cannot carry a read or a write out of the work directory.
    await agent.request("exec", shell="ln -s /etc/hostname escape")
    with pytest.raises(SandboxRefused, match="outside the work directory"):
        await agent.request("read", path="escape")
    with pytest.raises(SandboxRefused, match="no such file"):
        await agent.request("read", path="nothing-here.txt")


async def test_save_and_restore_round_trip(agent: AgentChannel, tmp_path: Path) -> None:
    await agent.request("exec", shell="mkdir -p d && echo one > d/1.txt && echo two > 2.txt")
    saved = await agent.request("save")
    await agent.request("exec", shell="rm -rf d 2.txt")
    restored = await agent.request("restore", tar=saved["tar"])
    assert restored["files"] == 2
    both = await agent.request("exec", shell="cat d/1.txt 2.txt")
    assert both["stdout"] == "one\ntwo\n"


async def test_seed_needs_real_entropy_and_bad_requests_are_refused(
    agent: AgentChannel,
) -> None:
    with pytest.raises(SandboxRefused, match="32 bytes"):
        await agent.request("seed", entropy=base64.b64encode(b"short").decode())
    assert "reseeded" in await agent.request("seed", entropy=base64.b64encode(
        bytes(range(64))).decode())
    with pytest.raises(SandboxRefused, match="unknown op"):
        await agent.request("format-disk")
    with pytest.raises(SandboxRefused, match="needs python, shell or argv"):
        await agent.request("exec")


async def test_a_dead_agent_is_reported_lost(agent: AgentChannel) -> None:
    with pytest.raises(SandboxLost, match="went away"):  # the code kills the agent itself
        await agent.request("exec", shell="kill -9 $PPID")
    with pytest.raises(SandboxLost, match="closed"):
        await agent.request("ping")


async def test_builtin_tools_check_arguments_before_anything_runs() -> None:
    from tenantry.ids import RunId, TenantId

    tools = BuiltinTools(None)
    tenant, run = TenantId("tenant-a"), RunId.new()
    cases = {("run_python", "{}"): "needs 'code'",
             ("run_shell", '{"command": 3}'): "must be a string",
             ("run_python", '{"code": "1", "timeout_s": 0}'): "number of seconds",
             ("write_file", '{"path": "a"}'): "needs 'content'",
             ("list_files", '{"recursive": true}'): "takes no argument"}
    import json

    for (tool, arguments), expected in cases.items():
        outcome = await tools.call(tenant, run, tool, json.loads(arguments))
        assert not outcome.ok and expected in outcome.text, (tool, outcome.text)
    unavailable = await tools.call(tenant, run, "run_python", {"code": "print(1)"})
    assert not unavailable.ok and "not available" in unavailable.text
