"""Tool gateways that fail on purpose."""

from __future__ import annotations

import asyncio
from typing import Any

from tenantry.tools.gateway import ToolGateway, ToolResult


class DiesAfterTheCall(ToolGateway):
    """Sends the call, then the worker 'crashes' before the result can be saved."""

    async def call(self, *args: Any, **kwargs: Any) -> ToolResult:
        await super().call(*args, **kwargs)
        raise asyncio.CancelledError
