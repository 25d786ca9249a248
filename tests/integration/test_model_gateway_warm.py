"""A process's first model call waits for nothing of the gateway's own: the
accounts' HTTP clients are built when the gateway starts, not in the first call (where
building one account's client cost 0.7 s before the TLS context was shared, and still
~40-150 ms after), and the time a call spent opening its connection is measured apart from
the provider's answer, so the trace can count it as the gateway's."""

from __future__ import annotations

from collections.abc import Sequence

from tenantry.models import gateway as gateway_module
from tenantry.models.accounts import ModelAccount
from tenantry.models.gateway import ModelGateway
from tenantry.models.types import ModelRequest, ProviderClient
from tenantry.testing.fake_model import FakeModelServer


def _request(run_key: str) -> ModelRequest:
    return ModelRequest("scripted", ({"role": "user", "content": "hi"},), run_key=run_key,
                        tenant="t")


async def test_clients_are_built_at_start_and_connecting_is_measured_apart() -> None:
    built: list[str] = []

    def factory(account: ModelAccount, key: str | None, timeout: float) -> ProviderClient:
        built.append(account.account_id)
        return gateway_module.http_client(account, key, timeout)

    async with FakeModelServer() as server:
        configured = ModelAccount("configured", "openai", server.base_url, ("scripted",), "us")
        # A tenant's account whose key is in the vault: read on its first call, as before.
        in_vault = ModelAccount("in-vault", "openai", server.base_url, ("other",), "us",
                                tenant="01890000-0000-7000-8000-000000000000",
                                secret_name="openai-key")

        async def registered() -> Sequence[ModelAccount]:
            return [in_vault]

        gateway = ModelGateway(None, implicit=[(configured, None)], load_accounts=registered,
                               client_factory=factory)
        async with gateway:
            assert built == ["configured"]
            first = await gateway.complete(_request("run-1"))
            again = await gateway.complete(_request("run-1"))  # same shard: pooled
            await gateway.refresh()
    assert built == ["configured"]  # not again in the call, nor on a refresh
    assert first.account == "configured"
    # A fresh connection took some time to open, inside the measured latency; a pooled one
    # took none.
    assert 0 < first.connect_ms <= first.latency_ms
    assert again.connect_ms == 0
