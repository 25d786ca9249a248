"""Running the `tenantry` client CLI as a subprocess."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

TENANTRY = str(Path(sys.executable).with_name("tenantry"))


async def cli(*args: str, env: dict[str, str]) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        TENANTRY, *args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        env={**{k: v for k, v in os.environ.items() if not k.startswith("TENANTRY_")},
             "COLUMNS": "200", **env})
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()
