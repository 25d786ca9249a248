"""``tenantry tool-servers`` and ``tenantry secrets`` without a platform: the flags each
command takes become the request the SDK sends (through a mock transport), its answer the
lines a person or a pipe reads, and a refusal the exit status. (Against the real routes:
tests/integration/test_tenant_tool_servers_sdk.py.)"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx2
import orjson
import pytest
from typer.testing import CliRunner

import tenantry.client
from tenantry.cli import app

CREATED = "2025-03-01T12:00:00Z"
SECRET = {"name": "crm-token", "created_at": CREATED, "updated_at": CREATED}
SERVER: dict[str, Any] = {
    "server_id": "tsv_1", "name": "crm", "url": "https://crm.example.com/mcp",
    "honours_idempotency_keys": True, "secret": "crm-token", "tools": ["lookup", "refund"],
    "tools_sha256": "0123456789abcdef" * 4, "call_timeout_seconds": 30,
    "registered_by": "tenant", "created_at": CREATED, "oauth": None}
HOSTED: dict[str, Any] = {
    **SERVER, "name": "hosted", "url": "https://hosted.example.com/mcp", "secret": None,
    "tools": [], "registered_by": "operator",
    "oauth": {"status": "authorization_required", "reason": "not connected yet",
              "grant": "authorization_code", "scope": None,
              "issuer": "https://auth.example.com", "expires_at": None, "connected_at": None}}
AUTHORIZE = "https://auth.example.com/authorize?state=s1"
ENV = {"TENANTRY_URL": "http://platform.test", "TENANTRY_API_KEY": "tnt_k", "COLUMNS": "200"}


class Platform:
    """Answers the CLI's requests in order and records them."""

    def __init__(self) -> None:
        self.answers: list[httpx2.Response] = []
        self.seen: list[httpx2.Request] = []

    def answer(self, *answers: httpx2.Response) -> None:
        self.answers += answers

    def handler(self, request: httpx2.Request) -> httpx2.Response:
        self.seen.append(request)
        return self.answers.pop(0)

    def sent(self) -> list[tuple[str, str, Any]]:
        return [(r.method, r.url.raw_path.decode(),
                 orjson.loads(r.content) if r.content else None) for r in self.seen]


@pytest.fixture
def platform(monkeypatch: pytest.MonkeyPatch) -> Iterator[Platform]:
    """The SDK's client, as the CLI makes it, sending to a mock platform."""
    mock = Platform()
    real = tenantry.client.Client

    def client(url: str, api_key: str, *, transport: object = None,
               **options: Any) -> tenantry.client.Client:
        # As the tenant: no operator transport (--tenant) in these tests.
        assert (url, api_key, transport) == ("http://platform.test", "tnt_k", None)
        return real(url, api_key, transport=httpx2.MockTransport(mock.handler), **options)

    monkeypatch.setattr(tenantry.client, "Client", client)
    yield mock
    assert mock.answers == [], "an answer was left: a request the test expected was not sent"


def ok(body: Any, status: int = 200) -> httpx2.Response:
    return httpx2.Response(status, json=body)


def problem(status: int, type_: str, detail: str) -> httpx2.Response:
    return httpx2.Response(status, headers={"content-type": "application/problem+json"},
                           content=orjson.dumps({"type": type_, "title": "t",
                                                 "status": status, "detail": detail}))


def tenantry_(*args: str, stdin: str | None = None) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, list(args), input=stdin, env=ENV)
    return result.exit_code, result.stdout, result.stderr


# -- secrets ----------------------------------------------------------------------------


def test_a_secret_is_put_from_standard_input_one_line_break_left_out(
        platform: Platform) -> None:
    platform.answer(ok(SECRET, 201), ok({**SECRET, "updated_at": "2025-03-02T00:00:00Z"}))
    code, out, err = tenantry_("secrets", "put", "crm-token", stdin="sk_live_1\n")
    assert code == 0, err
    assert out == "stored secret crm-token\n"
    code, out, _ = tenantry_("secrets", "put", "crm-token", stdin="multi\nline\r\n")
    assert code == 0 and out == "stored secret crm-token (its value replaced)\n"
    assert platform.sent() == [("PUT", "/v1/secrets/crm-token", {"value": "sk_live_1"}),
                               ("PUT", "/v1/secrets/crm-token", {"value": "multi\nline"})]


def test_a_value_is_never_taken_from_the_command_line_nor_sent_empty(
        platform: Platform) -> None:
    code, _, err = tenantry_("secrets", "put", "crm-token", "sk_live_1")
    assert code == 2 and "unexpected extra argument" in err.lower(), err
    code, _, err = tenantry_("secrets", "put", "crm-token", stdin="\n")
    assert code == 2 and "the value is empty" in err
    assert platform.seen == []
    help_text = " ".join(tenantry_("secrets", "put", "-h")[1].split())
    assert "never from an argument" in help_text and "standard input" in help_text


def test_secrets_are_listed_over_every_page_as_tab_separated_lines_in_a_pipe(
        platform: Platform) -> None:
    second = {**SECRET, "name": "hosted-client"}
    platform.answer(ok({"data": [SECRET], "next_cursor": "crm-token"}),
                    ok({"data": [second], "next_cursor": None}))
    code, out, err = tenantry_("secrets", "list")
    assert code == 0, err
    assert out.splitlines() == ["name\tcreated (UTC)\tupdated (UTC)",
                                "crm-token\t2025-03-01T12:00:00\t2025-03-01T12:00:00",
                                "hosted-client\t2025-03-01T12:00:00\t2025-03-01T12:00:00"]
    assert [path for _, path, _ in platform.sent()] == [
        "/v1/secrets?limit=200", "/v1/secrets?limit=200&cursor=crm-token"]
    platform.answer(ok({"data": [SECRET], "next_cursor": None}))
    code, out, _ = tenantry_("secrets", "list", "--json")
    assert code == 0 and orjson.loads(out) == [SECRET]


def test_removing_a_secret_a_server_still_sends_is_refused_with_exit_status_1(
        platform: Platform) -> None:
    platform.answer(problem(409, "conflict", "tool server 'crm' sends this secret"),
                    httpx2.Response(204), problem(404, "not_found", "No secret named 'x'."))
    code, out, err = tenantry_("secrets", "remove", "crm-token")
    assert code == 1 and out == "" and "refused: tool server 'crm' sends this secret" in err
    code, out, _ = tenantry_("secrets", "remove", "crm-token")
    assert code == 0 and out == "removed secret crm-token\n"
    code, _, err = tenantry_("secrets", "remove", "x")
    assert code == 2 and err.strip() == "error: 404: No secret named 'x'."
    assert [m for m, _, _ in platform.sent()] == ["DELETE"] * 3


# -- tool servers -----------------------------------------------------------------------


def test_register_sends_its_flags_as_the_body_and_shows_the_server(platform: Platform) -> None:
    platform.answer(ok(SERVER, 201), ok(HOSTED, 201))
    code, out, err = tenantry_("tool-servers", "register", "crm",
                               "https://crm.example.com/mcp", "--honours-idempotency-keys",
                               "--secret", "crm-token", "--call-timeout", "120")
    assert code == 0, err
    assert "tools\tlookup, refund" in out.splitlines() and "registered by\ttenant" in out
    code, out, err = tenantry_("tool-servers", "register", "hosted",
                               "https://hosted.example.com/mcp",
                               "--no-honours-idempotency-keys", "--oauth-grant",
                               "client_credentials", "--oauth-client-id", "c1",
                               "--oauth-client-secret", "hosted-client", "--json")
    assert code == 0 and orjson.loads(out) == HOSTED
    # A server waiting for its OAuth connection says how to connect it (not on stdout).
    assert "tenantry tool-servers connect hosted" in err
    assert platform.sent() == [
        ("POST", "/v1/tool-servers", {"name": "crm", "url": "https://crm.example.com/mcp",
                                      "honours_idempotency_keys": True,
                                      "secret": "crm-token", "call_timeout_seconds": 120}),
        ("POST", "/v1/tool-servers", {
            "name": "hosted", "url": "https://hosted.example.com/mcp",
            "honours_idempotency_keys": False,
            "oauth": {"grant": "client_credentials", "client_id": "c1",
                      "client_secret": "hosted-client"}})]


@pytest.mark.parametrize(("args", "said"), [
    ((), "--honours-idempotency-keys"),  # a choice with consequences: never a default
    (("--honours-idempotency-keys", "--call-timeout", "0"), "--call-timeout"),
    (("--honours-idempotency-keys", "--call-timeout", "3601"), "--call-timeout"),
    (("--honours-idempotency-keys", "--oauth-grant", "password"), "--oauth-grant"),
])
def test_register_refuses_bad_flags_before_sending_anything(
        platform: Platform, args: tuple[str, ...], said: str) -> None:
    code, _, err = tenantry_("tool-servers", "register", "crm", "https://crm.example.com/mcp",
                             *args)
    assert code == 2 and said in err, err
    assert platform.seen == []


def test_a_url_the_operators_rules_refuse_is_one_line_and_exit_status_2(
        platform: Platform) -> None:
    platform.answer(problem(422, "tool_server_url_refused",
                            "url: 127.0.0.1 is a loopback address"))
    code, out, err = tenantry_("tool-servers", "register", "local", "http://127.0.0.1:9/mcp",
                               "--honours-idempotency-keys")
    assert (code, out) == (2, "")
    assert err.strip() == "error: 422: url: 127.0.0.1 is a loopback address"


def test_servers_are_listed_over_every_page_with_how_calls_are_authorized(
        platform: Platform) -> None:
    platform.answer(ok({"data": [SERVER], "next_cursor": "crm"}),
                    ok({"data": [HOSTED], "next_cursor": None}))
    code, out, err = tenantry_("tool-servers", "list")
    assert code == 0, err
    assert [line.split("\t") for line in out.splitlines()] == [
        ["name", "url", "tools", "authorization", "keys", "timeout s", "by", "created (UTC)"],
        ["crm", "https://crm.example.com/mcp", "2", "secret crm-token", "yes", "30", "tenant",
         "2025-03-01T12:00:00"],
        ["hosted", "https://hosted.example.com/mcp", "0", "oauth authorization_required",
         "yes", "30", "operator", "2025-03-01T12:00:00"]]
    assert [path for _, path, _ in platform.sent()] == [
        "/v1/tool-servers?limit=200", "/v1/tool-servers?limit=200&cursor=crm"]


def test_show_pin_and_remove_name_the_server_in_the_path(platform: Platform) -> None:
    platform.answer(ok(HOSTED), ok({**SERVER, "tools": ["lookup"]}), httpx2.Response(204))
    code, out, err = tenantry_("tool-servers", "show", "hosted")
    assert code == 0, err
    rows = dict(line.split("\t", 1) for line in out.splitlines())
    assert rows["oauth"] == "authorization_required: not connected yet"
    assert rows["oauth issuer"] == "https://auth.example.com" and rows["tools"] == "—"
    code, out, _ = tenantry_("tool-servers", "pin", "crm")
    assert code == 0 and out.splitlines() == ["pinned crm: 1 tool(s), sha256 0123456789ab…",
                                              "lookup"]
    code, out, _ = tenantry_("tool-servers", "remove", "crm")
    assert code == 0 and out == "removed tool server crm\n"
    assert platform.sent() == [("GET", "/v1/tool-servers/hosted", None),
                               ("POST", "/v1/tool-servers/crm/pin", None),
                               ("DELETE", "/v1/tool-servers/crm", None)]


def test_connect_prints_the_authorization_url_and_opens_it_when_asked(
        platform: Platform, monkeypatch: pytest.MonkeyPatch) -> None:
    opened: list[str] = []
    monkeypatch.setattr("webbrowser.open", lambda url: opened.append(url) or True)
    connected = {**HOSTED, "tools": ["lookup"],
                 "oauth": {**HOSTED["oauth"], "status": "connected", "reason": None}}
    platform.answer(ok({"authorization_url": AUTHORIZE, "server": HOSTED}),
                    ok({"authorization_url": AUTHORIZE, "server": HOSTED}),
                    ok({"authorization_url": None, "server": connected}))
    code, out, err = tenantry_("tool-servers", "connect", "hosted")
    # The URL alone on stdout (for a script or a copy); what to do with it on stderr.
    assert (code, out) == (0, AUTHORIZE + "\n") and "browser" in err
    assert opened == []
    code, out, _ = tenantry_("tool-servers", "connect", "hosted", "--open")
    assert code == 0 and out == AUTHORIZE + "\n" and opened == [AUTHORIZE]
    # The client credentials grant: connected at once, nothing to open.
    code, out, _ = tenantry_("tool-servers", "connect", "hosted", "--open")
    assert code == 0 and out == "hosted is connected: 1 tool(s)\n" and opened == [AUTHORIZE]
    assert platform.sent() == [("POST", "/v1/tool-servers/hosted/connect", None)] * 3


def test_no_key_is_refused_before_anything_is_sent(platform: Platform) -> None:
    result = CliRunner().invoke(app, ["tool-servers", "list"],
                                env={**ENV, "TENANTRY_API_KEY": ""})
    assert result.exit_code == 2 and "API key" in result.stderr
    assert platform.seen == []
