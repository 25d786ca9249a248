"""The scheduled billing reconciliation's settings, checked at start-up: the operator's
webhook URL and the admin keys by account (billing/schedule.py). A refusal never shows a
key."""

from __future__ import annotations

import re
from urllib.parse import urlsplit

from tenantry.errors import ConfigurationError

#: A model account's id (models/accounts.py says the same).
ACCOUNT_ID = re.compile(r"^[a-z0-9][a-z0-9_-]{1,63}$")


def check_reconciliation(webhook_url: str | None, pairs: tuple[str, ...]) -> None:
    problem = ("TENANTRY_OPERATOR_WEBHOOK_URL must be an http:// or https:// URL, got "
               f"{(webhook_url or '')[:200]!r}")
    try:
        parts = urlsplit(webhook_url or "")
        parts.port  # noqa: B018 - raises on a port out of range
    except ValueError:
        raise ConfigurationError(problem) from None
    if webhook_url is not None and (parts.scheme not in ("http", "https")
                                    or not parts.hostname or parts.fragment):
        raise ConfigurationError(problem)
    for pair in pairs:
        account, equals, key = pair.partition("=")
        if not ACCOUNT_ID.fullmatch(account) or not key:
            shown = f"one for {account[:64]!r}" if equals else "one with no '='"
            raise ConfigurationError(
                "TENANTRY_RECONCILE_ADMIN_KEYS must be comma-separated account=key pairs, "
                f"each naming a model account id; got {shown}")


def admin_keys(pairs: tuple[str, ...]) -> dict[str, str]:
    return {account: key for account, _, key in (pair.partition("=") for pair in pairs)}
