"""Waiting for an observation instead of sleeping."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable


async def until(
    check: Callable[[], Awaitable[bool]], what: str, within: float,
    details: Callable[[], str] = str,
) -> None:
    """Poll ``check`` (a database, API or log observation) until it holds."""
    deadline = time.monotonic() + within
    while not await check():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {within:.0f}s: {what}\n{details()}")
        await asyncio.sleep(0.05)
