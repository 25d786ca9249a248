"""What the tool gateway keeps between calls: every per-tenant cache is
bounded in entries and time, and no decrypted credential outlives the call that sent it —
neither in the gateway nor in the MCP client's pooled sessions under it."""

from __future__ import annotations

import collections
import uuid
from typing import Any

import pytest

from tenantry.agents.spec import AgentSpec
from tenantry.db import Database
from tenantry.ids import RunId, TenantId
from tenantry.tools import gateway as gateway_module
from tenantry.tools.gateway import ToolGateway
from tenantry.tools.mcp_client import McpToolClient
from tenantry.vault import Vault
from tests.support.api import TEST_MASTER_KEY, Api
from tests.support.worker import Fakes

SECRET = "s3cr3t-bearer-9c1d77e2"
SPEC = AgentSpec(model="scripted", system_prompt="", tools=("echo",))


def _holders(root: object, needle: str) -> list[str]:
    """Where, in the objects of Tenantry's own types reachable from ``root`` (through
    containers, attributes and slots), a str or bytes holds ``needle``."""
    found: list[str] = []
    seen: set[int] = set()
    stack: list[tuple[object, str]] = [(root, type(root).__name__)]
    while stack:
        obj, path = stack.pop()
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        if isinstance(obj, str):
            if needle in obj:
                found.append(path)
        elif isinstance(obj, bytes | bytearray | memoryview):
            if needle.encode() in bytes(obj):
                found.append(path)
        elif isinstance(obj, dict):
            for key, value in obj.items():
                stack += [(key, f"{path} key"), (value, f"{path}[{key!r:.40}]")]
        elif isinstance(obj, list | tuple | set | frozenset | collections.deque):
            stack += [(item, f"{path}[{i}]") for i, item in enumerate(obj)]
        elif type(obj).__module__.startswith("tenantry."):
            names = set(getattr(obj, "__dict__", {}))
            for klass in type(obj).__mro__:
                names.update(getattr(klass, "__slots__", ()))
            for name in names:
                if hasattr(obj, name):
                    stack.append((getattr(obj, name), f"{path}.{name}"))
    return found


async def _tenant_with_secret_server(api: Api, fakes: Fakes) -> TenantId:
    tenant, _ = await api.tenant()
    r = await api.client.put(f"/admin/v1/tenants/{tenant}/secrets/crm-token",
                             json={"value": SECRET}, headers=api.operator)
    assert r.status_code == 201
    r = await api.client.post(f"/admin/v1/tenants/{tenant}/tool-servers", headers=api.operator,
                              json={"name": "crm", "url": fakes.mcp.url,
                                    "honours_idempotency_keys": True, "secret": "crm-token"})
    assert r.status_code == 201, r.text
    return TenantId.parse(tenant)


async def test_no_decrypted_credential_outlives_its_call(
    api: Api, fakes: Fakes, db: Database,
) -> None:
    tenant = await _tenant_with_secret_server(api, fakes)
    async with McpToolClient() as mcp:
        gateway = ToolGateway(db, mcp, vault=Vault(db, TEST_MASTER_KEY))
        for n in range(3):  # a fresh session, then calls on the pooled one
            result = await gateway.call(tenant, SPEC, "echo", {"text": f"hi {n}"},
                                        f"run_x:{n}:0", run=RunId(uuid.uuid4()))
            assert result.result == f"hi {n}", result
        # The server got the token on every request that needed it...
        assert {c.authorization for c in fakes.mcp.calls} == {f"Bearer {SECRET}"}
        # ... and nothing the gateway or its MCP client keeps holds it any more.
        assert _holders(gateway, SECRET) == []
        assert gateway.cache_sizes()["credentials"] == 1  # kept sealed, for the next call


async def test_per_tenant_caches_are_bounded_however_many_tenants_call(
    api: Api, fakes: Fakes, db: Database, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(gateway_module, "CACHE_ENTRIES", 3)
    tenants = [await _tenant_with_secret_server(api, fakes) for _ in range(6)]
    async with McpToolClient() as mcp:
        gateway = ToolGateway(db, mcp, vault=Vault(db, TEST_MASTER_KEY))
        sizes: list[dict[str, Any]] = []
        for i, tenant in enumerate(tenants):
            result = await gateway.call(tenant, SPEC, "echo", {"text": "x"}, f"run_{i}:1:0",
                                        run=RunId(uuid.uuid4()))
            assert result.result == "x", result
            sizes.append(gateway.cache_sizes())
    assert sizes[-1] == {"directory": 3, "breakers": 3, "pins_checked": 3, "credentials": 3}
    assert all(max(s.values()) <= 3 for s in sizes)
