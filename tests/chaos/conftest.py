"""What the chaos tests share: a model server and the MCP server that counts effects, one
of each per test (their request logs are what a test checks)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tenantry.testing.fake_model import FakeModelServer
from tenantry.testing.mcp_server import EffectsMcpServer


@pytest.fixture
async def mcp() -> AsyncIterator[EffectsMcpServer]:
    async with EffectsMcpServer() as server:
        yield server


@pytest.fixture
async def model() -> AsyncIterator[FakeModelServer]:
    async with FakeModelServer() as server:
        yield server
