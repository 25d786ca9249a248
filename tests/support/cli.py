"""Running the `tenantry` client CLI as a subprocess."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

TENANTRY = str(Path(sys.executable).with_name("tenantry"))


async def cli(*args: str, env: dict[str, str],
              stdin: str | None = None) -> tuple[int, str, str]:
    """The command's exit status, stdout and stderr; ``stdin`` is piped to it when given."""
    proc = await asyncio.create_subprocess_exec(
        TENANTRY, *args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        stdin=None if stdin is None else asyncio.subprocess.PIPE,
        env={**{k: v for k, v in os.environ.items() if not k.startswith("TENANTRY_")},
             "COLUMNS": "200", **env})
    out, err = await asyncio.wait_for(
        proc.communicate(None if stdin is None else stdin.encode()), 60)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def cli_on_terminal(*args: str, env: dict[str, str], columns: int) -> tuple[int, str]:
    """The command's exit status and what a terminal ``columns`` wide shows of its output
    (stdout and stderr, colours and other escapes removed): it runs on a pseudo-terminal,
    so it prints what a person sees, not what it prints into a pipe."""
    import pty
    import re
    import struct
    import termios
    from fcntl import ioctl

    main, side = pty.openpty()
    ioctl(side, termios.TIOCSWINSZ, struct.pack("HHHH", 50, columns, 0, 0))
    proc = await asyncio.create_subprocess_exec(
        TENANTRY, *args, stdin=asyncio.subprocess.DEVNULL, stdout=side, stderr=side,
        env={**{k: v for k, v in os.environ.items() if not k.startswith("TENANTRY_")},
             "COLUMNS": str(columns), "TERM": "xterm", **env})
    os.close(side)

    def read_all() -> bytes:
        chunks: list[bytes] = []
        while True:
            try:
                chunk = os.read(main, 65536)
            except OSError:  # EIO: the command closed its side
                return b"".join(chunks)
            if not chunk:
                return b"".join(chunks)
            chunks.append(chunk)

    try:
        out = await asyncio.wait_for(asyncio.to_thread(read_all), 60)
        code = await asyncio.wait_for(proc.wait(), 60)
    finally:
        os.close(main)
    shown = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07", "",
                   out.decode().replace("\r\n", "\n"))
    return code, shown
