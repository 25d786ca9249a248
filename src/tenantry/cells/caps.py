"""What one tenant may hold of the router's connections to its cell (ADR 0028, "Caps and
deadlines").

The router opens at most ``TENANTRY_ROUTER_CELL_CONNECTIONS`` connections to a cell, one per
forwarded request in flight; past that, requests queue for a free one and, after the head
timeout, every tenant of the cell is refused. So each tenant may have at most
``per_tenant`` requests in flight, of which at most ``streams_per_tenant`` event streams
(a stream counts as both: a tenant's whole share is ``per_tenant``), and the operator's
calls at most ``operator_per_cell`` per cell. Past a cap the answer is an immediate 429: the
same ``overloaded`` type as a cell's stream cap, which the SDK retries after Retry-After.

Counted per router process, on its event loop only (plain counters suffice), like the
pool whose share they bound."""

from __future__ import annotations

from dataclasses import dataclass, field

from tenantry.errors import Overloaded

#: Seconds a refused request is told to wait: a tenant's ordinary calls end in moments.
REQUEST_RETRY_AFTER = 1
#: ...and a refused stream: streams end when their runs do (as a cell's stream cap says).
STREAM_RETRY_AFTER = 5


class TooManyInFlight(Overloaded):
    """A caller has as many requests (or event streams) in flight through this router as
    it may. Only the caller's own counts decide it, so the answer tells nothing about
    anyone else."""

    status = 429
    title = "Too many requests in flight"


class Hold:
    """One forwarded request's place under its caps; :meth:`release` once it is done
    (however it ends; a second call does nothing)."""

    __slots__ = ("_counts", "_keys")

    def __init__(self, counts: dict[str, int], keys: tuple[str, ...]) -> None:
        self._counts = counts
        self._keys = keys

    def release(self) -> None:
        keys, self._keys = self._keys, ()
        for key in keys:
            left = self._counts[key] - 1
            if left:
                self._counts[key] = left
            else:
                del self._counts[key]  # bounded: only callers with something in flight


@dataclass(slots=True)
class InFlight:
    """One per router process: requests in flight by caller, taken before a request is
    forwarded and released when its answer has been passed on (or dropped)."""

    per_tenant: int
    streams_per_tenant: int
    operator_per_cell: int
    _counts: dict[str, int] = field(default_factory=dict)

    def held(self, key: str) -> int:
        return self._counts.get(key, 0)

    def tenant(self, tenant: str, *, stream: bool) -> Hold:
        """A place for one request of ``tenant`` (an event stream when ``stream``), or
        :class:`TooManyInFlight`."""
        requests = f"t:{tenant}"
        if self.held(requests) >= self.per_tenant:
            raise TooManyInFlight(
                f"This tenant has {self.per_tenant} requests in flight through the router, "
                f"as many as it may; retry after {REQUEST_RETRY_AFTER} second(s).",
                retry_after=REQUEST_RETRY_AFTER)
        if not stream:
            return self._take((requests,))
        streams = f"s:{tenant}"
        if self.held(streams) >= self.streams_per_tenant:
            raise TooManyInFlight(
                f"This tenant has {self.streams_per_tenant} event streams open through the "
                f"router, as many as it may; close one or retry after {STREAM_RETRY_AFTER} "
                "seconds.", retry_after=STREAM_RETRY_AFTER)
        return self._take((requests, streams))

    def operator(self, cell: str) -> Hold:
        """A place for one operator call to ``cell``, or :class:`TooManyInFlight`."""
        key = f"o:{cell}"
        if self.held(key) >= self.operator_per_cell:
            raise TooManyInFlight(
                f"{self.operator_per_cell} operator calls to cell {cell!r} are in flight "
                "through this router, as many as it allows; retry after "
                f"{REQUEST_RETRY_AFTER} second(s).", retry_after=REQUEST_RETRY_AFTER)
        return self._take((key,))

    def _take(self, keys: tuple[str, ...]) -> Hold:
        for key in keys:
            self._counts[key] = self.held(key) + 1
        return Hold(self._counts, keys)
