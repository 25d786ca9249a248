"""The first request of an egress stream, as the proxy reads it: ``CONNECT host:port`` or
an absolute-URI plain-HTTP request, and the refusal answers the code sees."""

from __future__ import annotations

import re
from dataclasses import dataclass

from tenantry.sandbox.egress.policy import normalize_host, parse_port, printable


class BadRequest(Exception):
    """Not a request this proxy serves (answered 400)."""


@dataclass(frozen=True, slots=True)
class ProxyRequest:
    method: str
    host: str  # normalized
    port: int
    tunnel: bool  # CONNECT: after 200, bytes flow untouched
    forward_head: bytes = b""  # plain HTTP: the request head to send upstream


#: Headers that belong to the hop between the code and this proxy, never forwarded.
_HOP_BY_HOP = frozenset({"connection", "proxy-connection", "keep-alive", "proxy-authorization",
                         "proxy-authenticate", "te", "trailer", "upgrade", "host"})
_REQUEST_LINE = re.compile(r"^([A-Z]{1,20}) (\S{1,8000}) HTTP/1\.[01]$")


def parse_request_head(head: bytes) -> ProxyRequest:
    """Parse the head (up to the blank line) of the first request on a stream."""
    lines = head.decode("latin-1").split("\r\n")
    match = _REQUEST_LINE.match(lines[0])
    if match is None:
        raise BadRequest("not an HTTP/1.x request line")
    method, target = match.groups()
    if method == "CONNECT":
        host, port = _splitauthority(target, default_port=443)
        return ProxyRequest(method, host, port, tunnel=True)
    if target[:8].lower() == "https://":
        raise BadRequest("https:// URLs go through CONNECT (set HTTPS_PROXY)")
    if target[:7].lower() != "http://":
        raise BadRequest("only CONNECT and absolute http:// URLs are proxied "
                         "(is HTTP_PROXY set?)")
    rest = target[7:]
    cut = min((i for i in (rest.find(c) for c in "/?#") if i >= 0), default=len(rest))
    authority, path = rest[:cut], rest[cut:].split("#", 1)[0]
    host, port = _splitauthority(authority, default_port=80)
    if not path.startswith("/"):
        path = "/" + path
    headers: list[str] = []
    dropped = set(_HOP_BY_HOP)
    for line in lines[1:]:
        if not line:
            continue
        if line[0] in " \t" or ":" not in line:
            raise BadRequest("malformed header line")
        name, value = line.split(":", 1)
        if name.strip().lower() == "connection":
            dropped |= {token.strip().lower() for token in value.split(",")}
        headers.append(line)
    kept = [line for line in headers if line.split(":", 1)[0].strip().lower() not in dropped]
    host_header = f"[{host}]" if ":" in host else host
    if port != 80:
        host_header += f":{port}"
    forward = [f"{method} {path} HTTP/1.1", f"Host: {host_header}", *kept,
               "Connection: close", "", ""]
    return ProxyRequest(method, host, port, tunnel=False,
                        forward_head="\r\n".join(forward).encode("latin-1"))


def _splitauthority(authority: str, *, default_port: int) -> tuple[str, int]:
    if "@" in authority:
        raise BadRequest("credentials in the URL are not supported")
    if authority.startswith("["):
        end = authority.find("]")
        host_text, rest = authority[:end + 1], authority[end + 1:]
        if end < 0 or (rest and not rest.startswith(":")):
            raise BadRequest("malformed IPv6 literal")
        port_text = rest[1:] if rest else None
    elif authority.count(":") > 1:
        raise BadRequest("an IPv6 address must be in brackets")
    else:
        host_text, colon, port_text_raw = authority.partition(":")
        port_text = port_text_raw if colon else None
    port = default_port if port_text is None else parse_port(port_text)
    host = normalize_host(host_text)
    if port is None or host is None:
        raise BadRequest(f"malformed host or port in {printable(authority)!r}")
    return host, port


_PHRASES = {400: "Bad Request", 403: "Forbidden", 408: "Request Timeout",
            502: "Bad Gateway", 503: "Service Unavailable", 504: "Gateway Timeout"}


def refusal_response(status: int, reason: str) -> bytes:
    """The answer to a refused request: the reason in the status line (what HTTP
    clients put in their exception for a failed CONNECT) and as the one-line body."""
    line = f"tenantry egress: {printable(reason)}"
    body = (line + "\n").encode()
    return (f"HTTP/1.1 {status} {_PHRASES.get(status, 'Error')} ({line})\r\n"
            "Content-Type: text/plain; charset=utf-8\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n"
            "X-Tenantry-Egress: refused\r\n\r\n").encode() + body
