"""Retention (ADR 0017): terminal runs and tasks leave after the tenant's
operator-selected retention, or on request; an immutable tombstone says what was there;
usage facts and the audit log outlive them.

- ``policy``: the per-tenant policy (runs, tombstones, audit, blobs) and its defaults.
- ``cleaner``: leased, fenced passes over one tenant in bounded batches (one transaction
  each, ``tenantry_retention_batch``), then the blob outbox.
- ``tombstones``: what remains of a deleted run, as the API shows it.
- ``erase``: deletion on request — one run, or a whole tenant (crypto-shredding).
"""
