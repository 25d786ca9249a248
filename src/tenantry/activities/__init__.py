"""Tenants' own activity code (DESIGN §11): the bundle a tenant uploads (``bundle``) and
one attempt of it in a fresh sandbox (``attempt``). Nothing of the database here: the
dispatcher (leases, retries, dead letters) calls ``run_attempt`` and records the outcome."""

from tenantry.activities.attempt import (
    AttemptOutcome,
    AttemptRequest,
    run_attempt,
    run_attempt_in,
)
from tenantry.activities.bundle import Bundle

__all__ = ["AttemptOutcome", "AttemptRequest", "Bundle", "run_attempt", "run_attempt_in"]
