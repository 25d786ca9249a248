"""Slots for open event streams (SSE), counted per process and per tenant.

A stream holds no pool connection while it waits (the hub wakes it), but it does hold a
socket, a task and a hub subscription for as long as the client keeps it open: without a
cap one tenant could open streams until the process runs out of file descriptors. A slot is
taken before the stream's first read and given back when the response ends, however it
ends (the client went away, the run ended, the server is closing)."""

from __future__ import annotations

from collections.abc import AsyncIterable
from typing import Any

from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

from tenantry.errors import Overloaded

#: Seconds a refused client is told to wait: streams end when their runs do.
RETRY_AFTER = 5


class TooManyStreams(Overloaded):
    """The same answer whichever cap was reached, so it never tells a tenant how many
    streams the other tenants hold."""

    status = 429
    title = "Too many open event streams"


class Slot:
    def __init__(self, slots: StreamSlots, tenant: str | None) -> None:
        self._slots = slots
        self._tenant = tenant
        self._held = True

    def release(self) -> None:
        if self._held:  # once, whichever of the ways out gets here first
            self._held = False
            self._slots._release(self._tenant)


class StreamSlots:
    """One per API process (in `Platform`). Taken and released on the event loop only,
    so plain counters suffice."""

    def __init__(self) -> None:
        self._total = 0
        self._per_tenant: dict[str, int] = {}
        self._refused = {"tenant": 0, "process": 0}  # by the cap reached: bounded labels

    @property
    def open(self) -> int:
        return self._total

    def held_by(self, tenant: str) -> int:
        return self._per_tenant.get(tenant, 0)

    def take(self, tenant: str | None, *, max_total: int, max_per_tenant: int) -> Slot:
        """A slot for one stream of ``tenant`` (None: the operator's console, counted in
        the process's total only), or TooManyStreams."""
        cap = ("process" if self._total >= max_total else
               "tenant" if tenant is not None and self.held_by(tenant) >= max_per_tenant
               else None)
        if cap is not None:
            self._refused[cap] += 1
            raise TooManyStreams(
                f"Too many open event streams; close one or retry after {RETRY_AFTER} "
                "seconds.", retry_after=RETRY_AFTER)
        self._total += 1
        if tenant is not None:
            self._per_tenant[tenant] = self.held_by(tenant) + 1
        return Slot(self, tenant)

    def render(self) -> str:
        """Prometheus text: streams open now, and refusals by the cap reached."""
        lines = [
            "# HELP tenantry_sse_streams_open Event streams this API process holds open.",
            "# TYPE tenantry_sse_streams_open gauge",
            f"tenantry_sse_streams_open {self._total}",
            "# HELP tenantry_sse_streams_refused_total Event streams refused (429), by the "
            "cap reached.",
            "# TYPE tenantry_sse_streams_refused_total counter",
        ]
        lines += [f'tenantry_sse_streams_refused_total{{cap="{cap}"}} {n}'
                  for cap, n in self._refused.items()]
        return "\n".join(lines) + "\n"

    def _release(self, tenant: str | None) -> None:
        self._total -= 1
        if tenant is not None:
            left = self._per_tenant[tenant] - 1
            if left:
                self._per_tenant[tenant] = left
            else:
                del self._per_tenant[tenant]


class SlotStream(StreamingResponse):
    """A streaming response that gives its slot back when it is done being sent."""

    def __init__(self, content: AsyncIterable[bytes], slot: Slot, **kwargs: Any) -> None:
        super().__init__(content, **kwargs)
        self._slot = slot

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self._slot.release()
