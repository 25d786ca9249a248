"""How the model gateway learns that a failing account serves again (ADR 0009): a probe is
a hint, a real call is proof, and a probe the provider does not support is not a failure.
In-memory provider clients and a hand-driven clock; no I/O."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

import pytest

from tenantry.ledger.tokens import TokenUsage
from tenantry.models.accounts import ModelAccount
from tenantry.models.errors import (
    ModelError,
    ModelsExhausted,
    ModelUnavailable,
    error_for_status,
    probe_tells_nothing,
)
from tenantry.models.gateway import GatewaySettings, ModelGateway
from tenantry.models.types import ModelReply, ModelRequest, ProviderClient
from tests.support.clock import Clock

ACCOUNT = ModelAccount("acct", "openai", "http://acct.invalid/v1", ("m",), "us")
REQUEST = ModelRequest(model="m", messages=({"role": "user", "content": "hi"},), run_key="r1")


@pytest.mark.parametrize("status", [404, 405, 501, 401, 403, 429, 400, 301])
def test_an_answer_that_is_not_a_server_failure_tells_nothing(status: int) -> None:
    assert probe_tells_nothing(error_for_status(status, {}, "no such route"))


@pytest.mark.parametrize("status", [500, 502, 503, 504, 529, 408, 409])
def test_a_server_failure_on_the_probe_is_a_failure(status: int) -> None:
    assert not probe_tells_nothing(error_for_status(status, {}, "down"))


def test_no_answer_at_all_is_a_failure() -> None:
    assert not probe_tells_nothing(ModelUnavailable("ConnectError: refused", reason="connect"))


@dataclass
class Provider:
    """One account's provider, as its client sees it."""

    probe_error: ModelError | None = None
    call_error: ModelError | None = None
    hold: asyncio.Event | None = None  # given: completions wait until it is set
    called: asyncio.Event = field(default_factory=asyncio.Event)
    probes: int = 0

    async def complete(self, request: ModelRequest) -> ModelReply:
        self.called.set()
        if self.hold is not None:
            await self.hold.wait()
        if self.call_error is not None:
            raise self.call_error
        return ModelReply(text="ok", calls=(), usage=TokenUsage(1, 1), provider="openai",
                          account=ACCOUNT.account_id, model=request.model)

    async def probe(self) -> None:
        self.probes += 1
        if self.probe_error is not None:
            raise self.probe_error


class Client:
    provider = "openai"
    account = ACCOUNT.account_id

    def __init__(self, provider: Provider) -> None:
        self._provider = provider

    async def complete(self, request: ModelRequest) -> ModelReply:
        return await self._provider.complete(request)

    async def probe(self) -> None:
        await self._provider.probe()

    async def aclose(self) -> None:
        return None


@dataclass
class Parked:
    """Records each wake the gateway asks for: (account, limit)."""

    wakes: list[tuple[str, int | None]] = field(default_factory=list)
    woke: asyncio.Event = field(default_factory=asyncio.Event)

    async def wake(self, account: ModelAccount, limit: int | None) -> int:
        self.wakes.append((account.account_id, limit))
        self.woke.set()
        return 0


async def _no_sleep(_seconds: float) -> None:
    return None


@dataclass
class Setup:
    gateway: ModelGateway
    provider: Provider
    parked: Parked
    clock: Clock

    def state(self) -> str:
        return self.gateway.breaker_states()[ACCOUNT.account_id]

    async def probe(self) -> None:
        await asyncio.gather(*self.gateway.probe_due())

    async def fail_a_call(self) -> None:
        self.provider.call_error = error_for_status(503, {}, "down")
        with pytest.raises(ModelsExhausted):
            await self.gateway.complete(REQUEST)
        self.provider.call_error = None


def setup(provider: Provider) -> Setup:
    clock, parked = Clock(), Parked()

    def factory(_account: ModelAccount, _key: str | None, _timeout: float) -> ProviderClient:
        return Client(provider)

    settings = GatewaySettings(attempts_per_account=1, breaker_threshold=1,
                               breaker_reset_seconds=10.0, breaker_max_reset_seconds=80.0,
                               probe_runs=1, probe_runs_retry_seconds=5.0)
    gateway = ModelGateway(None, settings=settings, implicit=[(ACCOUNT, None)],
                           client_factory=factory, sleep=_no_sleep, wake_parked=parked.wake,
                           clock=clock)
    return Setup(gateway, provider, parked, clock)


async def _half_open(s: Setup) -> None:
    await s.fail_a_call()
    assert s.state() == "open"
    s.clock.now += 10.0
    assert s.state() == "half_open"
    s.provider.called.clear()


async def test_an_unsupported_probe_leaves_the_slot_to_a_parked_runs_real_call() -> None:
    s = setup(Provider(probe_error=error_for_status(404, {}, "Not Found")))
    await _half_open(s)
    await s.probe()
    assert s.provider.probes == 1
    # Not a failure: the breaker did not open again, and one parked run was woken to try.
    assert s.state() == "half_open"
    assert s.parked.wakes == [("acct", 1)]
    # That run's real call takes the half-open slot, succeeds, and wakes all the others.
    s.parked.woke.clear()
    reply = await s.gateway.complete(REQUEST)
    assert reply.account == "acct" and s.state() == "closed"
    await asyncio.wait_for(s.parked.woke.wait(), 5)
    assert s.parked.wakes[-1] == ("acct", None)


async def test_when_the_woken_runs_call_fails_the_breaker_opens_again_and_starts_over() -> None:
    s = setup(Provider(probe_error=error_for_status(404, {}, "Not Found")))
    await _half_open(s)
    await s.probe()
    await s.fail_a_call()  # the woken run's call: the provider is still down
    assert s.state() == "open"
    s.clock.now += 19.9
    assert s.state() == "open"  # open twice as long as the first time
    s.clock.now += 0.1
    await s.probe()
    assert s.parked.wakes == [("acct", 1), ("acct", 1)]


async def test_while_no_woken_run_takes_the_slot_twice_as_many_are_woken_each_retry() -> None:
    s = setup(Provider(probe_error=error_for_status(405, {}, "Method Not Allowed")))
    await _half_open(s)
    await s.probe()
    await s.probe()  # not yet due again: the woken run may still be on its way
    s.clock.now += 5.0
    await s.probe()
    s.clock.now += 5.0
    await s.probe()
    assert s.parked.wakes == [("acct", 1), ("acct", 2), ("acct", 4)]
    assert s.state() == "half_open"


async def test_while_a_real_call_holds_the_slot_no_probe_is_made() -> None:
    s = setup(Provider(probe_error=error_for_status(404, {}, "Not Found")))
    await _half_open(s)
    s.provider.hold = hold = asyncio.Event()
    call = asyncio.create_task(s.gateway.complete(REQUEST))
    await asyncio.wait_for(s.provider.called.wait(), 5)
    await s.probe()
    assert s.provider.probes == 0 and s.parked.wakes == []
    hold.set()
    assert (await call).account == "acct"
    assert s.state() == "closed"


async def test_a_failing_probe_opens_the_breaker_again() -> None:
    s = setup(Provider(probe_error=error_for_status(503, {}, "down")))
    await _half_open(s)
    await s.probe()
    assert s.state() == "open" and s.parked.wakes == []


async def test_a_probe_that_answers_closes_the_breaker_and_wakes_every_parked_run() -> None:
    s = setup(Provider())
    await _half_open(s)
    await s.probe()
    assert s.state() == "closed" and s.parked.wakes == [("acct", None)]


async def test_a_call_cancelled_while_holding_the_half_open_slot_gives_it_back() -> None:
    """A run cancelled (or whose lease was lost) mid-call must not leave the account's
    breaker waiting forever for a verdict that will never come."""
    s = setup(Provider())
    await _half_open(s)
    s.provider.hold = hold = asyncio.Event()
    call = asyncio.create_task(s.gateway.complete(REQUEST))
    await asyncio.wait_for(s.provider.called.wait(), 5)
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call
    assert s.state() == "half_open"
    hold.set()
    assert (await s.gateway.complete(REQUEST)).account == "acct"
    assert s.state() == "closed"


async def test_a_run_told_to_park_learns_whether_an_account_recovered_meanwhile() -> None:
    """The wake-up after a recovery can run before a run that was failing at the same time
    has written its park; ``recovered_since`` tells that run to wake the parked ones itself."""
    s = setup(Provider())
    s.provider.call_error = error_for_status(503, {}, "down")
    with pytest.raises(ModelsExhausted) as failed:
        await s.gateway.complete(REQUEST)
    s.provider.call_error = None
    assert not failed.value.recovered_since()
    s.clock.now += 10.0
    await s.gateway.complete(REQUEST)  # the account serves again
    assert failed.value.recovered_since()
    await s.fail_a_call()
    s.provider.call_error = error_for_status(503, {}, "down")
    with pytest.raises(ModelsExhausted) as later:
        await s.gateway.complete(REQUEST)
    assert not later.value.recovered_since()
