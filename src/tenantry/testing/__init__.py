"""Helpers for testing agents on Tenantry, shipped for users' tests as well as ours: a
scripted model, a fake model server (OpenAI or Anthropic wire format, with a simulated
prompt cache, rate limits and outages), and an MCP test server.

Re-exports are lazy, so ``import tenantry.testing`` stays cheap (the MCP SDK takes ~2 s to
import) and ``python -m tenantry.testing.fake_model`` runs without a double import.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tenantry.models.scripted import (
        ECHO,
        Reply,
        Script,
        Step,
        ToolCall,
        Usage,
        UsageOverride,
        select_script,
    )
    from tenantry.testing.fake_model import FakeModelServer, RecordedRequest, UsageRecord
    from tenantry.testing.mcp_server import EffectsMcpServer, KeyCount, ToolCallRecord

_EXPORTS = {
    "ECHO": "tenantry.models.scripted",
    "Reply": "tenantry.models.scripted",
    "Script": "tenantry.models.scripted",
    "Step": "tenantry.models.scripted",
    "ToolCall": "tenantry.models.scripted",
    "Usage": "tenantry.models.scripted",
    "UsageOverride": "tenantry.models.scripted",
    "select_script": "tenantry.models.scripted",
    "FakeModelServer": "tenantry.testing.fake_model",
    "RecordedRequest": "tenantry.testing.fake_model",
    "UsageRecord": "tenantry.testing.fake_model",
    "EffectsMcpServer": "tenantry.testing.mcp_server",
    "KeyCount": "tenantry.testing.mcp_server",
    "ToolCallRecord": "tenantry.testing.mcp_server",
}

__all__ = [
    "ECHO",
    "EffectsMcpServer",
    "FakeModelServer",
    "KeyCount",
    "RecordedRequest",
    "Reply",
    "Script",
    "Step",
    "ToolCall",
    "ToolCallRecord",
    "Usage",
    "UsageOverride",
    "UsageRecord",
    "select_script",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__
