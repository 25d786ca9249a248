"""What the engine asks a model and what it gets back, independent of any wire format."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from tenantry.ledger.tokens import TokenUsage


@dataclass(frozen=True, slots=True)
class ModelToolCall:
    """A tool call exactly as the model wrote it: arguments stay raw text until the engine
    parses them, so a malformed call is recorded faithfully and answered with a tool error."""

    id: str
    name: str
    arguments: str

    def to_json(self) -> dict[str, str]:
        return {"id": self.id, "name": self.name, "arguments": self.arguments}


@dataclass(frozen=True, slots=True)
class RateLimitInfo:
    """An account's capacity as its provider last reported it in response headers
    (``None`` where the provider did not say). Resets are seconds from when it was read."""

    remaining_requests: int | None = None
    remaining_tokens: int | None = None
    reset_requests_seconds: float | None = None
    reset_tokens_seconds: float | None = None


class DeltaSink(Protocol):
    """Where a provider client reports a streamed reply's text as it arrives (the run
    engine publishes it to the run's live listeners, runs/deltas.py). Never saved: the
    complete reply is what the client returns."""

    @property
    def live(self) -> bool:
        """Whether somebody watches now. A call that starts unwatched is not streamed:
        reading a stream costs CPU per token, for nobody."""
        ...

    def restart(self) -> None:
        """A new attempt at the call has begun (its answer's head arrived): the text
        reported so far belongs to an attempt that failed and is void."""
        ...

    def text(self, chunk: str) -> None:
        """More of the reply's text, in order. Called on the event loop; must not block."""
        ...


#: Who owns a provider account: an operator (``platform``), or the tenant whose own key it
#: is (``tenant``, bring your own key: models/accounts.py).
PLATFORM, TENANT = "platform", "tenant"


@dataclass(frozen=True, slots=True)
class SnapshotPin:
    """A held provider snapshot (agents/snapshots.py): the id to ask for instead of the
    platform's name, and the owners of the accounts that reported it. It is sent only on
    accounts of those owners: a tenant's own account may report any id at all, and that id
    must never go out on a platform account (nor a platform-reported one on the tenant's)."""

    snapshot: str
    owners: frozenset[str]


@dataclass(frozen=True, slots=True)
class ModelRequest:
    """One model call. Provider clients read the first five fields (and the pins, for
    the wire's model name); the rest steer the model gateway (which account, which
    fallbacks, who waits first) and are ignored below it."""

    model: str
    messages: tuple[dict[str, Any], ...]
    tools: tuple[dict[str, Any], ...] = ()
    run_key: str = ""
    max_tokens: int | None = None
    # (input + output) tokens the caller estimated for this call; 0: not estimated.
    estimated_tokens: int = 0
    # -- routing (models/gateway.py) --
    tenant: str = ""
    region: str = ""  # the tenant's residency region; "" may use any account
    fallback_models: tuple[str, ...] = ()
    account: str = ""  # the account the run used last: it sticks there while healthy
    previous_model: str = ""  # the model the run used last
    in_flight: bool = False  # a later step of a run: served before first steps when busy
    # -- held snapshots --
    # Platform model name → the snapshot held for it (an agent whose tenant held back a
    # provider's model change), with the owners of the accounts that reported it.
    snapshot_pins: Mapping[str, SnapshotPin] = field(default_factory=dict)
    # The pins that apply on the one account a provider client sends this on: set by the
    # gateway per account from ``snapshot_pins`` (:meth:`on_account`); none unless it did.
    # Only the wire body's ``model`` changes: pricing, routing and the recorded model stay
    # the platform's name.
    provider_model_pins: Mapping[str, str] = field(default_factory=dict)
    # -- streaming (ADR 0030) --
    # Told the reply's text as it streams in, when it is live as the call starts and the
    # answering account streams; None: nobody is told (the reply is the same either way).
    deltas: DeltaSink | None = field(default=None, compare=False, repr=False)


    @property
    def wire_model(self) -> str:
        """The ``model`` a provider client sends: the pinned snapshot, else the name."""
        return self.provider_model_pins.get(self.model, self.model)

    def on_account(self, owner: str) -> ModelRequest:
        """This request as sent on an account of ``owner``: with the held snapshots that
        an account of that owner reported, and no other."""
        pins = {model: pin.snapshot for model, pin in self.snapshot_pins.items()
                if owner in pin.owners}
        if pins == self.provider_model_pins:
            return self
        return replace(self, provider_model_pins=pins)


@dataclass(frozen=True, slots=True)
class ModelReply:
    text: str
    calls: tuple[ModelToolCall, ...]
    usage: TokenUsage
    provider: str
    account: str
    # The model this call asked for (the platform's name, which prices it); the name the
    # provider echoed back, if different, is ``provider_model``.
    model: str
    latency_ms: float = 0.0
    # The part of latency_ms spent opening a connection (TCP connect, TLS handshake): the
    # gateway's set-up, not the provider's answer; 0 on a pooled connection.
    connect_ms: float = 0.0
    provider_model: str = ""
    # Who owns the account that answered (PLATFORM or TENANT; set by the gateway, "" when
    # no gateway chose it): what a snapshot the reply reports is noted as reported on.
    account_owner: str = ""
    rate_limits: RateLimitInfo | None = None
    # Set by the gateway when this reply came from another account or model than the run's
    # previous step: why it moved (recorded as ModelRerouted / ModelFallback).
    switch_reason: str = ""
    extra: dict[str, Any] = field(default_factory=dict)


class Model(Protocol):
    """Anything that answers chat requests: a provider client or the whole gateway."""

    async def complete(self, request: ModelRequest) -> ModelReply: ...


class ProviderClient(Model, Protocol):
    """One provider account's HTTP client (models/openai_compat.py, models/anthropic.py).
    Its ``complete`` tells ``request.deltas`` the text as it streams, if it streams."""

    provider: str
    account: str

    async def probe(self) -> None:
        """A cheap request that proves the endpoint answers (``GET …/models``); raises a
        :class:`~tenantry.models.errors.ModelError` if it does not."""
        ...

    async def aclose(self) -> None: ...
