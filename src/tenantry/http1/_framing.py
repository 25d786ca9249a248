"""The grammar of a response head and of its body's framing (RFC 9112), read strictly.

We call hosts a tenant controls (their MCP servers, their model endpoints) over pooled
keep-alive connections. Wherever two readings of a response's framing are possible, a
lenient reader may end a body somewhere its server did not, and the next response on that
connection starts in the wrong place (response splitting, a desync). So anything outside the
grammar, or ambiguous within it, is a :class:`ProtocolError`, never a guess (ADR 0022):

- lines end in CRLF: a bare LF or a bare CR anywhere in a head or in the chunked framing is
  refused (RFC 9112 §2.2 lets a recipient accept a bare LF; the parsers that disagreed about
  exactly that are where smuggling came from, and every server we talk to sends CRLF);
- status line ``HTTP/1.<digit> SP 3DIGIT [SP reason]`` with a status in 100-599 (a missing
  ``SP reason`` is accepted: it cannot move a boundary); field names are tokens, with no
  whitespace before the colon; no obs-fold; no NUL in a head; no HTAB around the value of
  ``Content-Length`` or ``Transfer-Encoding`` (RFC 9110 calls it whitespace, llhttp reads
  ``chunked<HTAB>`` as another coding);
- ``Content-Length`` is 1*DIGIT (at most 18 digits); a list of *identical* values collapses
  to one (RFC 9110 §8.6), anything else is refused;
- ``Transfer-Encoding`` must be exactly ``chunked``: we never ask for a transfer-coding (no
  ``TE`` header), cannot decode any other, and a body read "until close" after an
  undecodable coding would hand its raw bytes to the caller as the answer;
- ``Transfer-Encoding`` with ``Content-Length`` is refused rather than letting the first win
  (RFC 9112 §6.3 allows either; refusing costs only a server that contradicts itself, and
  nobody downstream can read the body differently from us), and so is ``Transfer-Encoding``
  in an HTTP/1.0 response (§6.1: its framing is faulty);
- chunk lines are ``1*16HEXDIG *(";" token ["=" (token / quoted-string)])`` — the grammar
  without its "bad whitespace", which senders must not send; trailer lines are field lines
  (and are dropped); extensions and trailers together are bounded per body (``_wire``).
"""

from __future__ import annotations

import re
from typing import NoReturn

from tenantry.http1.errors import ProtocolError

__all__ = [
    "Framing", "chunk_size", "content_length", "framing", "parse_head", "trailer_line",
]

#: A chunk size has at most this many hex digits (16: any size a 64-bit peer can send).
MAX_CHUNK_DIGITS = 16
#: A Content-Length has at most this many digits (any real one; it still meets the body cap).
MAX_LENGTH_DIGITS = 18

_FRAMING_FIELDS = frozenset({"content-length", "transfer-encoding"})
_TOKEN = rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+"
_TOKEN_CHARS = b"!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
# RFC 9112 §4; the reason phrase is HTAB / SP / VCHAR / obs-text.
_STATUS_LINE = re.compile(rb"HTTP/1\.[0-9] [1-5][0-9][0-9](?: [\t\x20-\x7e\x80-\xff]*)?")
_QUOTED = rb'"(?:[\t \x21\x23-\x5b\x5d-\x7e\x80-\xff]|\\[\t \x21-\x7e\x80-\xff])*"'
# RFC 9112 §7.1.1 without its BWS (whitespace around ";" and "="): senders must not send
# it, llhttp refuses it too, and "5 ;x" next to "5 x" is where parsers have disagreed. Each
# extension starts at a ";" that no other part can contain: no quadratic backtracking.
_CHUNK_LINE = re.compile(
    rb"([0-9A-Fa-f]{1,%d})((?:;%s(?:=(?:%s|%s))?)*)" % (MAX_CHUNK_DIGITS, _TOKEN, _TOKEN, _QUOTED))


def _shown(data: bytes | bytearray | str) -> str:
    return repr(bytes(data[:60]) if not isinstance(data, str) else data[:60])


def parse_head(head: bytes) -> tuple[int, str, dict[str, str], bool]:
    """(status, reason, headers with lower-case names, HTTP/1.0?) of a response head, its
    lines without the blank line that ends it. Repeated fields are joined with ", "
    (RFC 9110 §5.3)."""
    lines = head.split(b"\r\n")
    # Every LF and CR is one of the CRLFs split at: two counts in C, not a check per line.
    if head.count(b"\n") != len(lines) - 1:
        raise ProtocolError("bare LF in the response head (lines must end in CRLF)")
    if head.count(b"\r") != len(lines) - 1:
        raise ProtocolError("bare CR in the response head")
    if b"\0" in head:
        raise ProtocolError("NUL in the response head")
    status_line = lines[0]
    if _STATUS_LINE.fullmatch(status_line) is None:
        raise ProtocolError(f"bad status line {_shown(status_line)}")
    headers: dict[str, str] = {}
    names: list[bytes] = []
    for line in lines[1:]:  # inline, not a call per line: a dozen per response
        name, colon, raw = line.partition(b":")
        if not colon or not name:
            _bad_field(line, "header")
        names.append(name)
        key = name.decode("latin-1").lower()
        if key in _FRAMING_FIELDS and b"\t" in raw:
            # OWS by RFC 9110, yet llhttp reads "chunked<HTAB>" as not chunked (the body
            # until close): a framing two parsers read differently is refused.
            raise ProtocolError(f"tab in a {key} field {_shown(line)}")
        text = raw.strip(b" \t").decode("latin-1")
        previous = headers.get(key)
        headers[key] = text if previous is None else f"{previous}, {text}"
    # Names are tokens: one translate over them all, not one per line.
    if b"".join(names).translate(None, _TOKEN_CHARS):
        for i in range(1, len(lines)):
            if lines[i].partition(b":")[0].translate(None, _TOKEN_CHARS):
                _bad_field(lines[i], "header")
    # "HTTP/1.x NNN reason", the pattern matched: the parts are at fixed places.
    return int(status_line[9:12]), status_line[13:].decode("latin-1"), headers, \
        status_line[7] == 0x30


def _bad_field(line: bytes | bytearray, what: str) -> NoReturn:
    """Raise what is wrong with a field line that is not ``token ":" value``."""
    if line[:1] in (b" ", b"\t"):
        raise ProtocolError(f"obsolete line folding in a {what} (a line starting with "
                            f"whitespace): {_shown(line)}")
    name, colon, _ = line.partition(b":")
    if not colon or not name:
        raise ProtocolError(f"bad {what} line {_shown(line)}")
    if name.rstrip(b" \t").translate(None, _TOKEN_CHARS):
        raise ProtocolError(f"bad {what} name {_shown(name)}")
    raise ProtocolError(f"whitespace before the colon of {what} {_shown(name)}")


def trailer_line(line: bytes | bytearray) -> None:
    """Check one trailer field line (RFC 9112 §7.1.2); trailers are not kept."""
    if b"\n" in line or b"\r" in line:
        raise ProtocolError("bare CR or LF in a chunked trailer")
    if b"\0" in line:
        raise ProtocolError("NUL in a chunked trailer")
    name, colon, _ = line.partition(b":")
    if not colon or not name or name.translate(None, _TOKEN_CHARS):
        _bad_field(line, "trailer")


def chunk_size(line: bytes | bytearray) -> tuple[int, int]:
    """(size, bytes of chunk extensions) of one chunk line without its CRLF."""
    match = _CHUNK_LINE.fullmatch(line)
    if match is None:
        digits = len(line) - len(line.lstrip(b"0123456789abcdefABCDEF"))
        if digits > MAX_CHUNK_DIGITS:
            raise ProtocolError(f"chunk size of more than {MAX_CHUNK_DIGITS} hex digits: "
                                f"{_shown(line)}")
        raise ProtocolError(f"bad chunk size line {_shown(line)}")
    return int(match.group(1), 16), len(match.group(2))


def content_length(value: str) -> int:
    """The one length a ``Content-Length`` value (repeated fields joined by ", ") says."""
    if value.isdigit() and value.isascii() and len(value) <= MAX_LENGTH_DIGITS:
        return int(value)  # the common case: one value (str.isdigit alone takes "²")
    parts = [part.strip(" \t") for part in value.split(",")]
    for text in parts:
        if not (text.isascii() and text.isdigit()):  # str.isdigit alone takes "²"
            raise ProtocolError(f"bad Content-Length {_shown(value)}")
    text = parts[0]
    if parts.count(text) != len(parts):  # "5, 5" collapses; "5, 7" and "5, 05" do not
        raise ProtocolError(f"conflicting Content-Length {_shown(value)}")
    if len(text) > MAX_LENGTH_DIGITS:
        raise ProtocolError(f"Content-Length of more than {MAX_LENGTH_DIGITS} digits")
    return int(text)


#: How a response's body ends: (``length`` bytes (0: no body), ``chunked``, or neither: when
#: the server closes; ``reusable``: whether its connection may serve another request once
#: the body has ended). A plain tuple: one per response, and a NamedTuple costs 50 times more.
Framing = tuple[int | None, bool, bool]


def framing(status: int, headers: dict[str, str], http10: bool, method: str) -> Framing:
    """The framing of a final response's body (RFC 9112 §6.3), refusing ambiguous ones."""
    if status == 101:
        # We never send Upgrade: what follows would be another protocol on a pooled socket.
        raise ProtocolError("101 Switching Protocols to a request that asked for no upgrade")
    coding = headers.get("transfer-encoding")
    length_field = headers.get("content-length")
    length = None if length_field is None else content_length(length_field)
    if coding is not None:
        if length_field is not None:
            raise ProtocolError("both Transfer-Encoding and Content-Length in a response")
        if http10:
            raise ProtocolError("Transfer-Encoding in an HTTP/1.0 response")
        if coding.strip(" \t").lower() != "chunked":
            raise ProtocolError(f"unsupported Transfer-Encoding {_shown(coding)} (only "
                                "chunked is read: we ask for no transfer-coding)")
    if method == "HEAD" or status in (204, 304) or status < 200:
        # No body, whatever the head says. A 204 must not announce one (RFC 9110 §8.6,
        # §6.1); one that does may send it late, into the next request's answer.
        announced = coding is not None or bool(length)
        return 0, False, not (status == 204 and announced)
    if coding is not None:
        return None, True, True
    return length, False, True
