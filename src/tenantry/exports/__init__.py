"""A tenant's data out (issue 41, ADR 0044): everything it has — runs with their events,
traces and blobs, tombstones of deleted runs, agents and versions, test sets, evaluations,
usage — in one archive in the object store, read back through the API.

- :mod:`.jobs`: requesting, reading and listing exports (the tenant's side);
- :mod:`.archive`: writing one archive from tenant-scoped reads, in pages
  (docs/reference/export-format.md);
- :mod:`.runner`: the leased, fenced loop that carries exports out, beside the worker.

Archives leave with the tenant's other data: the retention cleaner deletes an export past
its ``expires_at``, and every export of a tenant being erased (``tenantry_expire_exports``)."""
