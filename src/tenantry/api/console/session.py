"""Console sessions and CSRF tokens, with one number of server-side state: the epoch.

Logging in with the operator token sets a cookie ``<expiry>.<epoch>.<nonce>.<mac>``: an
HMAC over the expiry, the session epoch and a random nonce, keyed by a key derived from the
operator token. An operator signing in as themselves (a link, or OpenID Connect: ADR 0043
§8) gets ``<expiry>.<epoch>.<nonce>.<operator id>.<mac>``, the MAC over their id too; who
they are and their role are read on each request (operators.py). Any API process
configured with the same token can verify it (no session table, no sticky load
balancing). Changing the operator token logs every console out; so does revoking
sessions, which moves the epoch (epoch.py) on without changing the token.
The CSRF token of a session is another HMAC of its nonce, so forms carry a value a
cross-site page cannot know or set.
Before login there is no session yet: the login form is protected by a double-submit
cookie (a random value both in a SameSite=Strict cookie and in the form)."""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
import time
from dataclasses import dataclass

SESSION_COOKIE = "tenantry_console"
LOGIN_COOKIE = "tenantry_console_login"
SESSION_SECONDS = 8 * 3600  # a working day; a stolen cookie is useless after it
_KEY_LABEL = b"tenantry console session v1"
_NUMBER = re.compile(r"[0-9]{1,19}")  # ASCII only: str.isdigit() also says yes to '²'


def _key(operator_token: str) -> bytes:
    # Derived, so the cookie never carries (or lets anyone brute-force offline against) a
    # value that is itself the operator credential's plain hash.
    return hmac.new(operator_token.encode(), _KEY_LABEL, hashlib.sha256).digest()


def _mac(key: bytes, *parts: str) -> str:
    return hmac.new(key, ".".join(parts).encode(), hashlib.sha256).hexdigest()


@dataclass(frozen=True, slots=True)
class Session:
    nonce: str
    expires_at: int  # Unix seconds
    epoch: int  # the session epoch it was issued in
    operator: str | None = None  # the operator's id (opr_…); None: the token's holder

    def csrf(self, operator_token: str) -> str:
        return _mac(_key(operator_token), "csrf", self.nonce)

    @property
    def ident(self) -> str:
        """Who acted, in the action log: one login's session (every operator shares the
        token, so the session is the finest identity there is). A digest of the nonce, so
        the log never holds what the session's CSRF token is derived from."""
        return hashlib.sha256(b"tenantry console session id\0" + self.nonce.encode()
                              ).hexdigest()[:16]


def issue(operator_token: str, *, epoch: int, operator: str | None = None,
          now: float | None = None) -> tuple[str, Session]:
    """A new session of the current ``epoch`` (of ``operator``, else of the token's holder)
    and its cookie value."""
    expires = int((time.time() if now is None else now) + SESSION_SECONDS)
    session = Session(secrets.token_hex(16), expires, epoch, operator)
    named = (session.nonce,) if operator is None else (session.nonce, operator)
    mac = _mac(_key(operator_token), "session", str(expires), str(epoch), *named)
    return ".".join((str(expires), str(epoch), *named, mac)), session


def verify(cookie: str | None, operator_token: str | None, *, epoch: int,
           now: float | None = None) -> Session | None:
    """The session the cookie proves, or None (absent, forged, expired, issued before the
    sessions were last revoked, or no operator token configured: then nobody can log in)."""
    if not cookie or not operator_token:
        return None
    parts = cookie.split(".")
    if len(parts) not in (4, 5) or not _NUMBER.fullmatch(parts[0]) \
            or not _NUMBER.fullmatch(parts[1]):
        return None
    expires, issued_in, *named, mac = parts
    expected = _mac(_key(operator_token), "session", expires, issued_in, *named)
    if not hmac.compare_digest(mac.encode(), expected.encode()):
        return None
    if int(issued_in) != epoch or int(expires) <= (time.time() if now is None else now):
        return None
    return Session(named[0], int(expires), epoch, named[1] if len(named) == 2 else None)


def same(a: str | None, b: str | None) -> bool:
    """Constant-time equality of two tokens, neither of which may be empty."""
    if not a or not b:
        return False
    return hmac.compare_digest(a.encode(), b.encode())
