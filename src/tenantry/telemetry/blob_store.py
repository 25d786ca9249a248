"""``tenantry_blob_store_errors_total``: object store calls that failed because the store
did not answer, by operation (write, read, delete), zero included so a rate is defined
before the first failure. Counted by each process's :class:`~tenantry.blobs.Blobs` (its
``failures``) and read at scrape time; like every process counter it restarts at zero with
the process. The alert on its rate is in deploy/monitoring/tenantry.rules.yml."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from tenantry.telemetry.registry import Registry, Sample

BLOB_STORE_ERRORS = "tenantry_blob_store_errors_total"
OPERATIONS = ("write", "read", "delete")


def watch_blob_store(registry: Registry,
                     failures: Callable[[], Mapping[str, int]]) -> Callable[[], None]:
    """Report a blob store's failed calls at each scrape; returns the un-register
    function."""
    registry.gauge(BLOB_STORE_ERRORS, "Object store calls that failed because the store "
                                      "did not answer (every attempt, retried ones "
                                      "included), by operation: write, read, delete.",
                   "counter")

    def collect() -> Iterable[Sample]:
        seen = failures()
        return [(BLOB_STORE_ERRORS, (("operation", op),), float(seen.get(op, 0)))
                for op in OPERATIONS]

    return registry.add_collector(collect)
