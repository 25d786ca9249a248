"""Where a console page's forms may lead (view.form_action): the console itself, plus the
origins of the OAuth authorization servers a tool servers page's Connect forms redirect to.
Those URLs come from a tool server's metadata, written by whoever runs that server: one
that is not a plain http(s) origin must add nothing to the header, least of all a
directive of its own."""

from __future__ import annotations

from tenantry.api.console.view import HEADERS, form_action


def _form_action(headers: dict[str, str]) -> list[str]:
    directives = [d.split() for d in headers["Content-Security-Policy"].split(";")]
    found = [d[1:] for d in directives if d and d[0] == "form-action"]
    assert len(found) == 1
    return found[0]


def test_without_urls_the_forms_lead_to_the_console_alone() -> None:
    assert form_action([]) is HEADERS
    assert _form_action(form_action([])) == ["'self'"]


def test_each_origin_is_added_once_without_path_or_query() -> None:
    headers = form_action(["https://Auth.Example.com/authorize?x=1",
                           "https://auth.example.com/other",
                           "http://127.0.0.1:8080/oauth/callback",
                           "https://[2001:db8::1]:8443/authorize"])
    assert _form_action(headers) == ["'self'", "http://127.0.0.1:8080",
                                     "https://[2001:db8::1]:8443", "https://auth.example.com"]
    # Everything else in the policy stays as strict as every other page's.
    rest = headers["Content-Security-Policy"].replace(" ".join(_form_action(headers)), "'self'")
    assert rest == HEADERS["Content-Security-Policy"]


def test_a_url_that_is_not_a_plain_origin_adds_nothing() -> None:
    for url in ("https://evil.example; script-src *", "https://evil.example,https://x",
                "https://user:pw@evil.example/", "javascript:alert(1)", "data:text/html,x",
                "//evil.example/", "https://[::1/", "", "*",
                "https://ev il.example/", "https://evil.example:80a/"):
        assert _form_action(form_action([url])) == ["'self'"], url
