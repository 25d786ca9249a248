"""Console session cookies: bound to the session epoch, and read as ASCII digits only."""

from __future__ import annotations

from tenantry.api.console import session

TOKEN = "op_unit"


def test_a_cookie_is_valid_only_in_the_epoch_it_was_issued_in() -> None:
    cookie, issued = session.issue(TOKEN, epoch=3, now=1000)
    assert session.verify(cookie, TOKEN, epoch=3, now=1001) == issued
    assert session.verify(cookie, TOKEN, epoch=4, now=1001) is None  # revoked since
    assert session.verify(cookie, "op_other", epoch=3, now=1001) is None


def test_the_epoch_cannot_be_edited_into_a_cookie() -> None:
    cookie, _ = session.issue(TOKEN, epoch=3, now=1000)
    expires, _, nonce, mac = cookie.split(".")
    assert session.verify(f"{expires}.4.{nonce}.{mac}", TOKEN, epoch=4, now=1001) is None


def test_numbers_in_a_cookie_are_ascii_digits() -> None:
    cookie, _ = session.issue(TOKEN, epoch=3, now=1000)
    expires, epoch, nonce, mac = cookie.split(".")
    for forged in (f"\u00b2.{epoch}.{nonce}.{mac}", f"{expires}.\u0663.{nonce}.{mac}",
                   f"+{expires}.{epoch}.{nonce}.{mac}", f"{expires}.{nonce}.{mac}", ""):
        assert session.verify(forged, TOKEN, epoch=3, now=1001) is None
