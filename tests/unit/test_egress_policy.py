"""Sandbox egress decisions without any I/O: the allow-list, the address vetting (every
range that must never be reached from a sandbox), the numeric-host tricks, the first-request
parser, and the frame codec the guest and host share."""

from __future__ import annotations

import ipaddress

import pytest

from tenantry.sandbox.egress.frames import (
    CLOSE,
    DATA,
    MAX_PAYLOAD,
    OPEN,
    WINDOW,
    Frame,
    FrameDecoder,
    FrameError,
    encode_frame,
    encode_window,
    window_increment,
)
from tenantry.sandbox.egress.policy import (
    EgressPolicy,
    IPAddress,
    Refusal,
    address_refusal,
    literal_address,
    resolve_and_vet,
)
from tenantry.sandbox.egress.request import BadRequest, parse_request_head, refusal_response

# -- the allow-list ---------------------------------------------------------------------


def test_exact_names_match_case_insensitively_on_the_default_ports() -> None:
    policy = EgressPolicy(("api.example.com",))
    assert policy.check("api.example.com", 443) is None
    assert policy.check("API.Example.COM", 80) is None
    assert policy.check("api.example.com.", 443) is None  # the fully qualified form
    reason = policy.check("api.example.com", 22)
    assert reason is not None and "api.example.com:22" in reason


def test_a_named_port_allows_that_port_only() -> None:
    policy = EgressPolicy(("pypi.org:443",))
    assert policy.check("pypi.org", 443) is None
    assert policy.check("pypi.org", 80) is not None
    assert policy.check("pypi.org", 8443) is not None


@pytest.mark.parametrize("host", [
    "example.com", "evil.com", "api.example.com.evil.com", "xapi.example.com",
    "sub.api.example.com", "api-example.com", "api.example.co",
])
def test_nothing_but_the_listed_name_matches(host: str) -> None:
    reason = EgressPolicy(("api.example.com",)).check(host, 443)
    assert reason is not None and "not in this agent's sandbox.egress" in reason


def test_a_wildcard_covers_subdomains_but_not_the_domain_itself() -> None:
    policy = EgressPolicy(("*.example.com",))
    assert policy.check("a.example.com", 443) is None
    assert policy.check("a.b.example.com", 443) is None
    assert policy.check("example.com", 443) is not None
    assert policy.check("evilexample.com", 443) is not None
    assert policy.check("example.com.evil.net", 443) is not None


def test_an_empty_policy_refuses_everything_and_says_why() -> None:
    reason = EgressPolicy(()).check("api.example.com", 443)
    assert reason is not None and "sandbox.egress is empty" in reason


@pytest.mark.parametrize("entry", ["*.com", "*", "*.127.0.0.1", "exa mple.com", "host:0",
                                   "host:99999", "host:http", "", "a..b"])
def test_bad_entries_are_rejected_when_the_policy_is_built(entry: str) -> None:
    with pytest.raises(ValueError, match="egress entry"):
        EgressPolicy((entry,))


@pytest.mark.parametrize("host", ["api.example.com\r\nX: y", "a b", "evil.com/x", "[::1%lo]",
                                  "fe80::1%eth0"])
def test_malformed_hosts_are_refused(host: str) -> None:
    assert EgressPolicy(("api.example.com",)).check(host, 443) is not None


# -- address vetting ----------------------------------------------------------------------

BLOCKED = [
    ("127.0.0.1", "loopback"), ("127.255.255.254", "loopback"), ("::1", "loopback"),
    ("0.0.0.0", "unspecified"), ("::", "unspecified"),
    ("10.1.2.3", "private"), ("172.16.0.1", "private"), ("172.31.255.255", "private"),
    ("192.168.1.1", "private"), ("fc00::1", "private"), ("fd12:3456::1", "private"),
    ("169.254.169.254", "link-local"), ("169.254.0.1", "link-local"), ("fe80::1", "link-local"),
    ("100.64.0.1", "carrier-grade NAT"), ("100.127.255.254", "carrier-grade NAT"),
    ("224.0.0.1", "multicast"), ("239.255.255.250", "multicast"), ("ff02::1", "multicast"),
    ("240.0.0.1", "reserved"), ("255.255.255.255", "reserved"),
    ("192.0.2.1", "special-purpose"), ("198.18.0.1", "special-purpose"),
    ("fec0::1", "site-local"), ("::7f00:1", "reserved"),  # IPv4-compatible ::127.0.0.1
    # The same, hidden inside IPv6 forms that reach the IPv4 address.
    ("::ffff:127.0.0.1", "loopback"), ("::ffff:169.254.169.254", "link-local"),
    ("::ffff:10.0.0.1", "private"), ("::ffff:0.0.0.0", "unspecified"),
    ("64:ff9b::a9fe:a9fe", "link-local"), ("64:ff9b::7f00:1", "loopback"),
    ("2002:7f00:1::", "loopback"), ("2002:a9fe:a9fe::1", "link-local"),
]


@pytest.mark.parametrize(("address", "kind"), BLOCKED)
def test_every_internal_range_is_refused_with_its_name(address: str, kind: str) -> None:
    reason = address_refusal(ipaddress.ip_address(address))
    assert reason is not None and kind in reason


@pytest.mark.parametrize("address", ["93.184.215.14", "8.8.8.8", "1.1.1.1", "151.101.0.223",
                                     "2606:4700::1111", "2a00:1450:4001:80b::200e",
                                     "64:ff9b::808:808", "::ffff:8.8.8.8"])
def test_public_unicast_addresses_pass(address: str) -> None:
    assert address_refusal(ipaddress.ip_address(address)) is None


def test_one_bad_address_among_good_ones_refuses_the_lot() -> None:
    policy = EgressPolicy(("api.example.com",))
    good = ipaddress.ip_address("93.184.215.14")
    bad = ipaddress.ip_address("169.254.169.254")
    reason = policy.vet_addresses([good, bad, good])
    assert reason is not None and "169.254.169.254" in reason
    assert policy.vet_addresses([good]) is None
    assert policy.vet_addresses([]) == "no address"


# -- resolution -------------------------------------------------------------------------


class Resolver:
    """A resolver that answers from a table and records what it was asked."""

    def __init__(self, table: dict[str, list[str]]) -> None:
        self.table = table
        self.asked: list[str] = []

    async def __call__(self, host: str, port: int) -> list[IPAddress]:
        self.asked.append(host)
        if host not in self.table:
            raise OSError(f"no such host {host}")
        return [ipaddress.ip_address(a) for a in self.table[host]]


@pytest.mark.parametrize(("host", "kind"), [
    ("2130706433", "loopback"), ("0x7f.1", "loopback"), ("0x7f000001", "loopback"),
    ("127.1", "loopback"), ("0177.0.0.1", "loopback"), ("127.0.0.1", "loopback"),
    ("0", "unspecified"), ("0.0.0.0", "unspecified"), ("[::1]", "loopback"),
    ("::1", "loopback"), ("[::ffff:127.0.0.1]", "loopback"),
    ("2852039166", "link-local"),  # 169.254.169.254 as one number
    ("0xa9.0xfe.0xa9.0xfe", "link-local"),
])
async def test_numeric_hosts_are_read_as_the_address_they_spell_and_refused(
        host: str, kind: str) -> None:
    """Even when a tenant (mis)listed the literal, it is vetted, and never sent to DNS."""
    resolver = Resolver({})
    entry = f"[{host}]" if host.count(":") > 1 and not host.startswith("[") else host
    result = await resolve_and_vet(host, 443, EgressPolicy((entry,)), resolver=resolver)
    assert isinstance(result, Refusal) and result.status == 403
    assert kind in result.reason
    assert resolver.asked == []


def test_numeric_forms_decode_like_the_c_resolver() -> None:
    assert literal_address("2130706433") == ipaddress.ip_address("127.0.0.1")
    assert literal_address("0x7f.1") == ipaddress.ip_address("127.0.0.1")
    assert literal_address("api.example.com") is None
    assert literal_address("cafe.be") is None  # hex-looking, but a name


async def test_a_host_off_the_list_is_never_resolved() -> None:
    resolver = Resolver({"evil.com": ["93.184.215.14"]})
    result = await resolve_and_vet("evil.com", 443, EgressPolicy(("api.example.com",)),
                                   resolver=resolver)
    assert isinstance(result, Refusal) and result.status == 403
    assert resolver.asked == []


@pytest.mark.parametrize("answer", [["127.0.0.1"], ["169.254.169.254"], ["10.0.0.7"],
                                    ["93.184.215.14", "192.168.0.1"], ["::ffff:127.0.0.1"]])
async def test_an_allowed_name_that_resolves_inside_is_refused(answer: list[str]) -> None:
    resolver = Resolver({"api.example.com": answer})
    result = await resolve_and_vet("api.example.com", 443, EgressPolicy(("api.example.com",)),
                                   resolver=resolver)
    assert isinstance(result, Refusal) and result.status == 403
    assert result.reason.startswith("api.example.com resolves to")


async def test_an_allowed_public_name_gives_its_addresses() -> None:
    resolver = Resolver({"api.example.com": ["93.184.215.14", "2606:2800:21f:cb07::1"]})
    result = await resolve_and_vet("API.example.com", 443,
                                   EgressPolicy(("api.example.com",)), resolver=resolver)
    assert result == (ipaddress.ip_address("93.184.215.14"),
                      ipaddress.ip_address("2606:2800:21f:cb07::1"))
    assert resolver.asked == ["api.example.com"]


async def test_a_name_that_does_not_resolve_is_a_bad_gateway() -> None:
    result = await resolve_and_vet("api.example.com", 443, EgressPolicy(("api.example.com",)),
                                   resolver=Resolver({}))
    assert isinstance(result, Refusal) and result.status == 502


# -- the first request ----------------------------------------------------------------


def test_connect_names_host_and_port() -> None:
    request = parse_request_head(b"CONNECT Api.Example.com:8443 HTTP/1.1\r\n"
                                 b"Host: api.example.com:8443\r\n\r\n")
    assert (request.host, request.port, request.tunnel) == ("api.example.com", 8443, True)
    v6 = parse_request_head(b"CONNECT [2606:4700::1111]:443 HTTP/1.1\r\n\r\n")
    assert (v6.host, v6.port) == ("2606:4700::1111", 443)


def test_plain_http_is_rewritten_for_the_origin() -> None:
    request = parse_request_head(
        b"POST http://api.example.com/v1/x?q=1 HTTP/1.1\r\n"
        b"Host: attacker.example\r\nProxy-Connection: keep-alive\r\n"
        b"Proxy-Authorization: Basic eA==\r\nConnection: keep-alive, X-Secret\r\n"
        b"X-Secret: 1\r\nContent-Length: 3\r\n\r\n")
    assert (request.host, request.port, request.tunnel) == ("api.example.com", 80, False)
    lines = request.forward_head.decode().split("\r\n")
    assert lines[0] == "POST /v1/x?q=1 HTTP/1.1"
    # The Host the origin sees is the one that was checked, not what the code claimed.
    assert "Host: api.example.com" in lines and "Host: attacker.example" not in lines
    assert "Content-Length: 3" in lines and "Connection: close" in lines
    assert not [line for line in lines if line.lower().startswith(("proxy-", "x-secret"))]
    assert request.forward_head.endswith(b"\r\n\r\n")


@pytest.mark.parametrize("head", [
    b"GET /path HTTP/1.1\r\nHost: api.example.com\r\n\r\n",  # not a proxy request
    b"GET https://api.example.com/ HTTP/1.1\r\n\r\n",
    b"GET ftp://api.example.com/ HTTP/1.1\r\n\r\n",
    b"GET http://user:pw@api.example.com/ HTTP/1.1\r\n\r\n",
    b"CONNECT api.example.com:99999 HTTP/1.1\r\n\r\n",
    b"CONNECT ::1:443 HTTP/1.1\r\n\r\n",
    b"CONNECT api.example.com:443 HTTP/2\r\n\r\n",
    b"GET http://api.example.com/ HTTP/1.1\r\n folded\r\n\r\n",
    b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n",  # TLS straight at the proxy
])
def test_what_is_not_a_proxy_request_is_a_bad_request(head: bytes) -> None:
    with pytest.raises(BadRequest):
        parse_request_head(head)


def test_a_refusal_carries_its_reason_on_one_line() -> None:
    response = refusal_response(403, "evil.com:443 is not allowed\r\nX-Injected: 1")
    head, body = response.split(b"\r\n\r\n", 1)
    status = head.split(b"\r\n")[0]
    assert status.startswith(b"HTTP/1.1 403 Forbidden (tenantry egress: evil.com:443")
    assert b"X-Injected: 1\r\n" not in response
    assert body.count(b"\n") == 1


# -- frames ---------------------------------------------------------------------------


def test_frames_decode_however_the_bytes_are_split() -> None:
    frames = [Frame(OPEN, 1, b""), Frame(DATA, 1, b"x" * MAX_PAYLOAD),
              Frame(WINDOW, 1, encode_window(1, 70000)[9:]), Frame(CLOSE, 1, b"")]
    wire = b"".join(encode_frame(*frame) for frame in frames)
    for step in (1, 7, 9, 1000, len(wire)):
        decoder = FrameDecoder()
        got = [f for i in range(0, len(wire), step) for f in decoder.feed(wire[i:i + step])]
        assert got == frames and decoder.pending == 0
    assert window_increment(frames[2].payload) == 70000


@pytest.mark.parametrize("wire", [
    bytes([9, 0, 0, 0, 1, 0, 0, 0, 0]),  # unknown kind
    bytes([DATA, 0, 0, 0, 0, 0, 0, 0, 1]) + b"x",  # stream 0
    bytes([DATA, 0, 0, 0, 1]) + (MAX_PAYLOAD + 1).to_bytes(4, "big"),  # oversized
    bytes([OPEN, 0, 0, 0, 1, 0, 0, 0, 1]) + b"x",  # OPEN with payload
    bytes([WINDOW, 0, 0, 0, 1, 0, 0, 0, 2]) + b"xx",  # short increment
    bytes([DATA, 0, 0, 0, 1, 0, 0, 0, 0]),  # empty DATA (EOF is CLOSE)
])
def test_malformed_frames_are_rejected(wire: bytes) -> None:
    with pytest.raises(FrameError):
        FrameDecoder().feed(wire)


def test_encoding_refuses_what_the_decoder_would_reject() -> None:
    with pytest.raises(ValueError, match="not a valid frame"):
        encode_frame(DATA, 1, b"x" * (MAX_PAYLOAD + 1))
    with pytest.raises(ValueError, match="not a valid frame"):
        encode_frame(DATA, 0, b"x")
