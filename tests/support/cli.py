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
