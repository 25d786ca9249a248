"""What the egress proxy keeps of refused attempts is bounded whatever its callers do:
refusals that nobody takes — an activity attempt nobody collected, a
sandbox that goes on trying after its run's last tool call — stay within a few MiB per
process, the oldest dropped first and still counted for their key; a take frees what it
returns."""

from __future__ import annotations

import tracemalloc

from tenantry.sandbox.egress import EgressProxy, EgressRefusal

#: The bound the proxy's docstring states (refusals.MAX_HELD_BYTES), spelled out here so the
#: test reads the same against any version of the proxy.
STATED_BOUND_BYTES = 4 * 1024 * 1024
KEYS = 20_000  # more (tenant, run) keys than any cap, none of them ever taken
PER_KEY = 3
CODES = ("not_allowed", "internal_address", "metadata_address")


def _context(i: int) -> dict[str, str]:
    # What the proxy's serve() notes under: the sandbox's tenant and run (or attempt).
    return {"tenant_id": f"tenant-{i % 97:02d}" + "x" * 55, "run_id": f"att_{i:032x}"}


def _refusal(i: int, j: int) -> EgressRefusal:
    # Hosts as long as the proxy keeps them (printable() caps them near 200 characters),
    # each its own string, as each request's is.
    return EgressRefusal(f"{i:06d}-{j}." + "h" * 190, 40_000 + j, CODES[j])


def _flood(proxy: EgressProxy) -> int:
    """Note KEYS x PER_KEY refusals; the bytes the proxy holds after."""
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for i in range(KEYS):
            context = _context(i)
            for j in range(PER_KEY):
                proxy._note_refusal(context, _refusal(i, j))
        return tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()


def test_refusals_nobody_takes_stay_within_the_stated_bound() -> None:
    proxy = EgressProxy()
    held_bytes = _flood(proxy)
    assert held_bytes <= STATED_BOUND_BYTES, f"{held_bytes / 2**20:.1f} MiB held"
    held = proxy.held()
    assert 0 < held.keys < KEYS and 0 < held.kept < held.refused
    # Every refused attempt is still counted under its key, or counted as lost with a key
    # dropped whole: none vanishes without a trace.
    assert held.refused + proxy.refusals_lost == KEYS * PER_KEY


def test_the_oldest_go_first_and_are_still_counted_for_their_key() -> None:
    proxy = EgressProxy()
    _flood(proxy)
    newest = _context(KEYS - 1)
    kept, dropped = proxy.take_refusals(newest["tenant_id"], newest["run_id"])
    assert kept == [_refusal(KEYS - 1, j) for j in range(PER_KEY)] and dropped == 0
    # A key old enough that its refusals were dropped to make room, but still held: what
    # it refused is reported by reason code, the details gone.
    oldest_held = KEYS - proxy.held().keys + 1
    context = _context(oldest_held)
    taken = proxy.take(context["tenant_id"], context["run_id"])
    assert taken.kept == () and taken.dropped == {code: 1 for code in CODES}
    assert taken.total == PER_KEY
    # The oldest keys went whole: nothing is left of them to take.
    first = _context(0)
    assert proxy.take_refusals(first["tenant_id"], first["run_id"]) == ([], 0)


def test_a_take_frees_what_it_returns_and_counts_past_the_per_key_cap() -> None:
    proxy = EgressProxy()
    context = _context(7)
    for i in range(1_200):
        proxy._note_refusal(context, EgressRefusal(
            "169.254.169.254" if i % 2 else "evil.example", 80,
            "metadata_address" if i % 2 else "not_allowed"))
    assert proxy.held(context["tenant_id"]).refused == 1_200
    taken = proxy.take(context["tenant_id"], context["run_id"])
    assert len(taken.kept) == 1_000 and taken.total == 1_200
    assert taken.by_reason() == {"not_allowed": 600, "metadata_address": 600}
    assert (proxy.held().keys, proxy.held().kept, proxy.held().refused) == (0, 0, 0)
    assert proxy.take(context["tenant_id"], context["run_id"]).total == 0
