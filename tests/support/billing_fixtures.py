"""The ``providers`` fixture: fake OpenAI and Anthropic servers that serve usage and cost
reports (priced as the platform prices the scripted model, guarded by ``ADMIN_KEY``)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tenantry.testing.fake_model import FakeModelServer
from tests.support.billing import ADMIN_KEY, PRICES


@pytest.fixture
async def providers() -> AsyncIterator[tuple[FakeModelServer, FakeModelServer]]:
    async with (FakeModelServer(provider="openai", admin_key=ADMIN_KEY, prices=PRICES) as oa,
                FakeModelServer(provider="anthropic", admin_key=ADMIN_KEY,
                                prices=PRICES) as an):
        yield oa, an
