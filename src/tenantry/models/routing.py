"""Which account a run's call goes to: a pure function of the run, the accounts, and which
of them are usable, so every worker makes the same choice for the same run.

Order: the run's current account first (the one its previous step used: its prompt cache
is warm there), then the rest by priority, and within a priority by rendezvous hashing of
the run id (highest-random-weight). Rendezvous hashing spreads runs evenly and, when one
account disappears, moves only the runs that were on it."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

from tenantry.models.accounts import ModelAccount


def candidates(
    accounts: Iterable[ModelAccount], *, model: str, tenant: str, region: str, run_key: str,
    current: str = "",
) -> list[ModelAccount]:
    """Accounts that serve ``model`` for this tenant and region, best first.

    If the tenant has its own accounts (bring your own key) for the model, only those are
    candidates: who pays the provider must not change behind the tenant's back."""
    usable = [a for a in accounts if a.serves(model) and a.allowed_for(tenant, region)]
    own = [a for a in usable if a.tenant is not None]
    if own:
        usable = own
    usable.sort(key=lambda a: (a.account_id != current, a.priority, -_weight(run_key, a)))
    return usable


def _weight(run_key: str, account: ModelAccount) -> int:
    digest = hashlib.blake2b(f"{run_key}\x00{account.account_id}".encode(), digest_size=8)
    return int.from_bytes(digest.digest(), "big")
