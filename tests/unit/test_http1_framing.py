"""The HTTP/1.1 client's framing (tenantry.http1: ``_wire``, ``_framing``) as properties,
with no socket: responses built from the RFC 9112 grammar, cut into any pieces, fed to the
connection as they would arrive, and read by the same ``Connection.answer_nowait`` and
``Body`` the client uses.

- A valid response, however it arrives, gives the status, headers and body it was built
  with, and its framing ends exactly where the next response on the connection starts;
  llhttp (httptools, an independent strict parser) reads the same body from it.
- Hostile bytes (valid responses mutated, truncated, garbage) end in a body or in one of
  the package's own errors (``tenantry.http1.errors``), the same whichever way they are
  cut; the connection holds at most a cap's worth of unread bytes after each read (the
  head cap while reading a head, a line's while reading chunked framing), the body never
  passes the body cap, and a refused framing aborts the connection (never pooled).
- Each kind of malformed framing gives a ProtocolError that says what was wrong.

Hypothesis runs derandomized (the same examples on every run, no example database)."""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import httptools
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tenantry.http1._wire import LINE_LIMIT, Connection
from tenantry.http1.errors import ConnectionLost, HttpError, ProtocolError, ResponseTooLarge

HEAD_LIMIT = 2048  # small caps, so that hostile inputs of a few KiB reach them
MAX_BODY = 4096
NEXT = b"HTTP/1.1 204 No Content\r\n\r\n"  # what follows a response on a kept-alive connection

CHECKS = settings(max_examples=200, derandomize=True, database=None, deadline=None,
                  suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


class Transport:
    """What a Connection asks of its transport; records whether it was aborted."""

    def __init__(self) -> None:
        self.closed = False
        self.paused = False

    def pause_reading(self) -> None:
        self.paused = True

    def resume_reading(self) -> None:
        self.paused = False

    def is_closing(self) -> bool:
        return self.closed

    def abort(self) -> None:
        self.closed = True

    def close(self) -> None:
        self.closed = True

    def write(self, data: bytes) -> None:
        pass


@dataclass(frozen=True)
class Read:
    status: int
    headers: dict[str, str]
    body: bytes
    rest: bytes  # what the connection holds past this response
    reusable: bool


INCOMPLETE = "incomplete"  # no EOF came and the response has not ended


def read(pieces: list[bytes], *, method: str = "GET", eof: bool = True,
         max_body: int = MAX_BODY) -> Read | str:
    """Feed ``pieces`` one by one (then the server's EOF), reading as far as each lets, as
    the client does; checks the bounds after every piece."""
    conn = Connection("http://test")
    transport = Transport()
    conn.connection_made(transport)  # type: ignore[arg-type]
    answer = None
    body: list[bytes] = []
    received = 0
    arriving = iter([*pieces, None])
    try:
        for piece in arriving:
            if piece is None:
                if not eof:
                    return INCOMPLETE
                conn.eof_received()
            else:
                conn.data_received(piece)
            while True:
                if answer is None:
                    answer = conn.answer_nowait(method, HEAD_LIMIT, max_body)
                    if answer is None:
                        assert conn.buffered <= HEAD_LIMIT
                        break
                data = answer[3].next_nowait()
                if data is None:
                    for more in arriving:  # what the server sent past this response
                        if more is not None:
                            conn.data_received(more)
                    status, _, headers, framing = answer
                    return Read(status, headers, b"".join(body), bytes(conn.peek()),
                                framing.reusable)
                if not data:
                    assert conn.buffered <= LINE_LIMIT + 1  # a line, and the CR of its CRLF
                    break
                body.append(data)
                received += len(data)
                assert received <= max_body
        raise AssertionError("unreachable: EOF ends every read")
    except HttpError:
        assert transport.closed, "a refused response left its connection open"
        raise


def outcome(pieces: list[bytes], **kwargs: object) -> object:
    """What ``read`` gives, or the type of error it raised (any other exception escapes)."""
    try:
        return read(pieces, **kwargs)  # type: ignore[arg-type]
    except HttpError as exc:
        return type(exc)


# -- the grammar, as strategies -------------------------------------------------------------

TCHARS = "!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
tokens = st.text(TCHARS, min_size=1, max_size=10).map(str.encode)
FRAMING_FIELDS = {b"content-length", b"transfer-encoding", b"connection"}
field_names = tokens.filter(lambda name: name.lower() not in FRAMING_FIELDS)
field_vchars = st.sampled_from([bytes([c]) for c in [*range(0x21, 0x7F), 0x80, 0xA0, 0xE9, 0xFF]])
field_values = st.lists(field_vchars | st.sampled_from([b" ", b"\t"]), max_size=16).map(
    lambda parts: b"".join(parts).strip(b" \t"))
ows = st.sampled_from([b"", b" ", b"\t", b"  "])
spaces = st.sampled_from([b"", b" ", b"  "])  # around framing fields: no HTAB (see below)
reasons = st.lists(field_vchars | st.just(b" "), max_size=12).map(b"".join)
quoted = st.lists(st.sampled_from([b"a", b" ", b";", b"=", b"\\\"", b"\\\\", b"\t", b"\xe9"]),
                  max_size=6).map(lambda parts: b'"' + b"".join(parts) + b'"')
extensions = st.lists(st.tuples(tokens, st.none() | tokens | quoted), max_size=2).map(
    lambda exts: b"".join(b";" + n + (b"" if v is None else b"=" + v) for n, v in exts))
# Bodies full of what framing is made of, so a reader that ends them early is caught.
bodies = st.lists(st.binary(max_size=40) | st.sampled_from(
    [b"\r\n", b"\r\n\r\n", b"0\r\n\r\n", b"\n", b"\r", b"5\r\nhello\r\n", NEXT]),
    max_size=8).map(b"".join)


@st.composite
def field_lines(draw: st.DrawFn) -> list[tuple[bytes, bytes, bytes]]:
    """(name, OWS + value + OWS, value) of each field."""
    out = []
    for _ in range(draw(st.integers(0, 4))):
        value = draw(field_values)
        out.append((draw(field_names), draw(ows) + value + draw(ows), value))
    return out


def hex_size(draw: st.DrawFn, size: int, zeros: int) -> bytes:
    digits = f"{size:x}"
    digits = "0" * min(zeros, 16 - len(digits)) + digits
    return "".join(c.upper() if draw(st.booleans()) else c for c in digits).encode()


@dataclass(frozen=True)
class Message:
    wire: bytes
    method: str
    status: int
    headers: dict[str, str]
    body: bytes
    kind: str  # length | chunked | close | none
    head_size: int  # where the body's framing starts in ``wire``


@st.composite
def messages(draw: st.DrawFn, kinds: tuple[str, ...] = ("length", "chunked", "close"),
             *, heads: bool = True, lists: bool = True) -> Message:
    """A valid response (after 0-2 interim ones) framed as one of ``kinds`` or, for a HEAD
    (only if ``heads``), a 204 or a 304, without a body; ``lists``: Content-Length may be
    repeated (the same value)."""
    method = "HEAD" if heads and draw(st.integers(0, 9)) == 0 else "GET"
    http10 = draw(st.integers(0, 5)) == 0
    version = b"HTTP/1.0" if http10 else b"HTTP/1.1"
    wire = b""
    for _ in range(draw(st.integers(0, 2))):  # interim answers
        code = draw(st.sampled_from([100, 102, 103]))
        lines = draw(field_lines())
        wire += b"HTTP/1.1 %d Interim\r\n" % code
        wire += b"".join(n + b":" + v + b"\r\n" for n, v, _ in lines) + b"\r\n"
    status = draw(st.sampled_from([200, 201, 204, 206, 304, 404, 500]) | st.integers(200, 599))
    no_body = method == "HEAD" or status in (204, 304)
    usable = [k for k in kinds if k != "chunked"] if http10 else kinds
    kind = "none" if no_body else draw(st.sampled_from(usable))
    body = b"" if no_body else draw(bodies)
    reason = draw(st.none() | reasons)
    wire += version + b" %d" % status + (b"" if reason is None else b" " + reason) + b"\r\n"
    lines = draw(field_lines())
    framing: list[bytes] = []
    if kind == "length" or (no_body and status != 204 and draw(st.booleans())):
        length = b"%d" % len(body) if kind == "length" else b"%d" % draw(st.integers(0, 10**6))
        repeat = draw(st.integers(0, 3)) if lists else 0
        if repeat == 1:
            framing.append(b"Content-Length: " + length + b", " + length)
        elif repeat == 2:
            framing += [b"Content-Length: " + length, b"content-length:" + length]
        else:
            framing.append(b"Content-Length:" + draw(spaces) + length + draw(spaces))
    elif kind == "chunked":
        framing.append(b"Transfer-Encoding: " + draw(st.sampled_from(
            [b"chunked", b"Chunked", b"CHUNKED"])) + draw(spaces))
    if kind == "close" or (http10 and draw(st.booleans())):
        framing.append(b"Connection: close")
    order = draw(st.permutations([n + b":" + v for n, v, _ in lines] + framing))
    headers: dict[str, str] = {}
    for line in order:  # what a reader makes of them: repeated names joined with ", "
        name, _, value = line.partition(b":")
        key = name.decode("latin-1").lower()
        text = value.strip(b" \t").decode("latin-1")
        headers[key] = text if key not in headers else f"{headers[key]}, {text}"
    if http10:
        headers.setdefault("connection", "close")
    wire += b"".join(f + b"\r\n" for f in order) + b"\r\n"
    head_size = len(wire)
    if kind == "chunked":
        cuts = sorted(set(draw(st.lists(st.integers(1, max(len(body) - 1, 1)), max_size=6))))
        edges = [0, *(c for c in cuts if c < len(body)), len(body)]
        for a, b in itertools.pairwise(edges):
            if b > a:
                zeros = draw(st.integers(0, 3))
                wire += hex_size(draw, b - a, zeros) + draw(extensions) + b"\r\n"
                wire += body[a:b] + b"\r\n"
        wire += b"0" * draw(st.integers(1, 3)) + draw(extensions) + b"\r\n"
        trailers = draw(field_lines())
        wire += b"".join(n + b":" + v + b"\r\n" for n, v, _ in trailers) + b"\r\n"
    elif kind in ("length", "close"):
        wire += body
    return Message(wire, method, status, headers, body, kind, head_size)


@st.composite
def cut(draw: st.DrawFn, data: bytes) -> list[bytes]:
    """``data`` in the pieces a socket might deliver it in."""
    if not data:
        return [data]
    points = sorted(set(draw(st.lists(st.integers(1, len(data)), max_size=12))))
    edges = [0, *points, len(data)]
    return [data[a:b] for a, b in itertools.pairwise(edges) if b > a]


def expected(message: Message) -> Read:
    follows = b"" if message.kind == "close" else NEXT
    return Read(message.status, message.headers, message.body, follows,
                message.kind != "close")


def sent(message: Message) -> bytes:
    """What the server sends: the response, then the next one unless it closes."""
    return message.wire + (b"" if message.kind == "close" else NEXT)


# -- valid responses ------------------------------------------------------------------------


@CHECKS
@given(st.data())
def test_a_valid_response_reads_the_same_however_it_arrives(data: st.DataObject) -> None:
    message = data.draw(messages())
    pieces = data.draw(cut(sent(message)))
    eof = message.kind == "close"
    assert read(pieces, method=message.method, eof=eof) == expected(message)
    assert read([sent(message)], method=message.method, eof=eof) == expected(message)


class _Llhttp:
    def __init__(self) -> None:
        self.body: list[bytes] = []
        self.complete = 0

    def on_body(self, body: bytes) -> None:
        self.body.append(body)

    def on_message_complete(self) -> None:
        self.complete += 1


@CHECKS
@given(messages(("length", "chunked"), heads=False, lists=False))
def test_llhttp_reads_the_same_body_from_the_generated_responses(message: Message) -> None:
    """The generator makes HTTP an independent strict parser accepts, with the same body:
    a check on the test itself (llhttp does not collapse "5, 5": no lists here)."""
    seen = _Llhttp()
    closes = message.headers.get("connection") == "close"  # llhttp: no data may follow
    httptools.HttpResponseParser(seen).feed_data(message.wire if closes else sent(message))
    assert b"".join(seen.body) == message.body
    assert seen.complete >= (1 if closes else 2)  # the response, and the next one
    assert read([sent(message)]) == expected(message)


@pytest.mark.parametrize("raw", [
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
    b'5;a=b;c="\\"d"\r\nhello\r\nA\r\n0123456789\r\n0\r\nX: 1\r\n\r\n' + NEXT,
    b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 15\r\n\r\n"
    b"hello0123456789" + NEXT,
])
def test_every_one_byte_cut_reads_the_same(raw: bytes) -> None:
    whole = read([raw], eof=False)
    assert isinstance(whole, Read) and whole.body == b"hello0123456789" and whole.rest == NEXT
    for at in range(1, len(raw)):
        assert read([raw[:at], raw[at:]], eof=False) == whole
    assert read([raw[i:i + 1] for i in range(len(raw))], eof=False) == whole


# -- hostile bytes --------------------------------------------------------------------------

SHARDS = [b"0x", b"_", b"+", b"-", b" ", b"\t", b"\n", b"\r", b"\r\n", b"\0", b";", b",",
          b"=", b'"', b":", b"ffffffffffffffff", b"99999999999999999999", b"\r\n\r\n",
          b"Content-Length: 3\r\n", b"Transfer-Encoding: chunked\r\n", b"0\r\n\r\n",
          b"HTTP/1.1 200 OK\r\n", b"\xff", b" \r\n\tfold: x\r\n"]


@st.composite
def mutated(draw: st.DrawFn) -> bytes:
    message = draw(messages(kinds=("chunked", "chunked", "length", "close")))
    wire = sent(message)
    for _ in range(draw(st.integers(1, 3))):
        # Mostly where the body's framing is: the head's checks are the easy part.
        start = draw(st.sampled_from([0, message.head_size, message.head_size]))
        at = draw(st.integers(min(start, len(wire)), len(wire)))
        how = draw(st.sampled_from(["insert", "replace", "delete", "truncate"]))
        if how == "insert":
            wire = wire[:at] + draw(st.sampled_from(SHARDS)) + wire[at:]
        elif how == "replace":
            wire = wire[:at] + draw(st.sampled_from(SHARDS)) + wire[at + 1:]
        elif how == "delete":
            wire = wire[:at] + wire[at + draw(st.integers(1, 8)):]
        else:
            wire = wire[:at]
    return wire


LONG = st.tuples(st.sampled_from([b"a", b"0", b"X: y\r\n", b";e", b"f"]),
                st.sampled_from([50, 2000, 4200, 9000])).map(
    lambda t: t[0] * (t[1] // len(t[0])))
hostile = st.one_of(
    mutated(),
    st.binary(max_size=300),
    st.tuples(st.sampled_from([b"HTTP/1.1 200 OK\r\n",
                               b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
                               b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1;x=",
                               b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n",
                               b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n"]),
              LONG).map(b"".join),
)


@settings(CHECKS, max_examples=400)
@given(st.data())
def test_hostile_bytes_end_in_a_body_or_the_packages_own_error(data: st.DataObject) -> None:
    wire = data.draw(hostile)
    eof = data.draw(st.booleans())
    method = data.draw(st.sampled_from(["GET", "HEAD"]))
    # Bounds are checked inside read(); anything but an HttpError escapes and fails here.
    whole = outcome([wire], eof=eof, method=method)
    pieces = outcome(data.draw(cut(wire)), eof=eof, method=method)
    assert pieces == whole  # the same body and rest, or the same error, however cut
    if isinstance(whole, Read):
        assert len(whole.body) <= MAX_BODY


@settings(CHECKS, max_examples=150)
@given(st.data())
def test_a_truncated_response_is_a_lost_connection_not_a_shorter_body(
        data: st.DataObject) -> None:
    message = data.draw(messages().filter(lambda m: m.kind != "close"))
    at = data.draw(st.integers(0, len(message.wire) - 1))
    got = outcome(data.draw(cut(message.wire[:at])), method=message.method)
    assert got is ConnectionLost


# -- malformed framing: each refused, saying what was wrong ----------------------------------

bad_sizes = st.one_of(
    st.tuples(st.sampled_from([b"0x", b"0X", b"+", b"-", b" ", b"\t", b"_"]),
              st.sampled_from([b"5", b"05", b"a"])).map(b"".join),
    st.sampled_from([b"5 ", b"5\t", b"0_5", b"5_", b"", b"g", b"5g", b"5;", b"5;=x", b"5 ;a",
                     b"5; a", b"5;a =b", b"5;a= b", b'5;a="b', b"5;a=b c", b"5;a\nb",
                     b"5\rx", b"5;a=\"\0\"", b"\xb5"]),
    st.integers(17, 40).map(lambda n: b"0" * (n - 1) + b"5"),
)


@CHECKS
@given(bad_sizes, st.integers(0, 2), st.data())
def test_a_bad_chunk_line_is_refused_as_such(size: bytes, which: int,
                                             data: st.DataObject) -> None:
    lines = [b"5\r\nhello\r\n", b"3\r\nabc\r\n", b"0\r\n\r\n"]
    lines[which] = size + lines[which][1:]
    wire = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + b"".join(lines)
    with pytest.raises(ProtocolError, match="chunk"):
        read(data.draw(cut(wire)), eof=data.draw(st.booleans()))


bad_lengths = st.one_of(
    st.sampled_from([b"+5", b"-5", b"0x5", b"5_0", b"5 5", b"", b"5,", b",5", b"5, 7",
                     b"5, 05", b"5,,5", b"\xb2", b"5\x0b", b"five", b"1e3", b"5.0"]),
    st.integers(19, 30).map(lambda n: b"1" * n),
    st.tuples(st.integers(0, 99), st.integers(0, 99)).filter(lambda t: t[0] != t[1]).map(
        lambda t: b"%d, %d" % t),
)


@CHECKS
@given(bad_lengths, st.booleans(), st.data())
def test_a_bad_content_length_is_refused_as_such(value: bytes, twice: bool,
                                                 data: st.DataObject) -> None:
    field = b"Content-Length: " + value + b"\r\n"
    head = b"HTTP/1.1 200 OK\r\n" + field + (b"Content-Length: 5\r\n" if twice else b"")
    with pytest.raises(ProtocolError, match="Content-Length"):
        read(data.draw(cut(head + b"\r\nhello")), eof=data.draw(st.booleans()))


@pytest.mark.parametrize(("head", "says"), [
    (b"Transfer-Encoding: chunked\r\nContent-Length: 5", "both Transfer-Encoding"),
    (b"Content-Length: 5\r\nTransfer-Encoding: chunked", "both Transfer-Encoding"),
    (b"Transfer-Encoding: gzip, chunked", "Transfer-Encoding"),
    (b"Transfer-Encoding: chunked, chunked", "Transfer-Encoding"),
    (b"Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked", "Transfer-Encoding"),
    (b"Transfer-Encoding: identity", "Transfer-Encoding"),
    (b"Transfer-Encoding: chunked;q=1", "Transfer-Encoding"),
    (b"Transfer-Encoding:", "Transfer-Encoding"),
    (b"Transfer-Encoding: chunked\t", "tab in a transfer-encoding"),
    (b"Content-Length:\t5", "tab in a content-length"),
    (b"X-A: b\r\n c", "folding"),
    (b"X-A : b", "whitespace before the colon"),
    (b"X A: b", "header name"),
    (b": b", "header line"),
    (b"no colon", "header line"),
    (b"X-A: b\nX-B: c", "bare LF"),
    (b"X-A: b\rX-B: c", "bare CR"),
    (b"X-A: b\0", "NUL"),
])
def test_a_bad_head_is_refused_as_such(head: bytes, says: str) -> None:
    raw = b"HTTP/1.1 200 OK\r\n" + head + b"\r\n\r\n5\r\nhello\r\n0\r\n\r\n"
    with pytest.raises(ProtocolError, match=says):
        read([raw])


@pytest.mark.parametrize("line", [
    b"HTTP/1.1 2OO OK", b"HTTP/1.1 20 OK", b"HTTP/1.1 2000 OK", b"HTTP/1.1 099 X",
    b"HTTP/1.1 600 X", b"HTTP/1.1  200 OK", b"http/1.1 200 OK", b"HTTP/1.1 200 O\x01K",
    b"HTTP/1.1\t200 OK", b"HTTP/1.12 200 OK", b"HTTP/2 200 OK", b"ICY 200 OK", b"",
])
def test_a_bad_status_line_is_refused(line: bytes) -> None:
    with pytest.raises(ProtocolError, match="status line"):
        read([line + b"\r\nContent-Length: 0\r\n\r\n"])


def test_a_head_past_its_cap_is_refused_however_it_arrives() -> None:
    raw = b"HTTP/1.1 200 OK\r\n" + b"X-Pad: " + b"p" * HEAD_LIMIT + b"\r\n\r\n"
    with pytest.raises(ProtocolError, match="head larger"):
        read([raw])
    with pytest.raises(ProtocolError, match="head larger"):
        read([raw[i:i + 100] for i in range(0, len(raw), 100)])


def test_lengths_past_the_body_cap_are_refused_before_their_bytes() -> None:
    with pytest.raises(ResponseTooLarge):
        read([b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % (MAX_BODY + 1)], eof=False)
    chunked = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
    with pytest.raises(ResponseTooLarge):
        read([chunked + b"%x\r\n" % (MAX_BODY + 1)], eof=False)
    with pytest.raises(ResponseTooLarge):  # the sum of the chunk sizes counts
        read([chunked + b"%x\r\nx\r\n%x\r\n" % (1, MAX_BODY)], eof=False)
    # A HEAD's or a 304's Content-Length is the representation's, not a body: no refusal.
    head = read([b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % (10 * MAX_BODY)],
                method="HEAD", eof=False)
    assert isinstance(head, Read) and head.body == b"" and head.reusable


def test_a_no_content_answer_that_announces_a_body_is_read_but_not_reusable() -> None:
    for field in (b"Content-Length: 5", b"Transfer-Encoding: chunked"):
        got = read([b"HTTP/1.1 204 No Content\r\n" + field + b"\r\n\r\n"], eof=False)
        assert isinstance(got, Read) and got.body == b"" and not got.reusable
    got = read([b"HTTP/1.1 204 No Content\r\nContent-Length: 0\r\n\r\n"], eof=False)
    assert isinstance(got, Read) and got.reusable


CHUNKED_HEAD = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"


@pytest.mark.parametrize("size", range(LINE_LIMIT - 2, LINE_LIMIT + 3))
def test_a_line_at_the_line_cap_is_read_the_same_however_it_arrives(size: int) -> None:
    """A chunk line or a trailer line of ``size`` bytes: refused past the cap, whether it
    arrives whole or cut anywhere near its end (where the reader sees it unended)."""
    for wire, line_end in (
            (CHUNKED_HEAD + b"1;" + b"e" * (size - 2) + b"\r\nx\r\n0\r\n\r\n",
             len(CHUNKED_HEAD) + size),
            (CHUNKED_HEAD + b"1\r\nx\r\n0\r\nX: " + b"t" * (size - 3) + b"\r\n\r\n",
             len(CHUNKED_HEAD) + 8 + size)):
        whole = outcome([wire], eof=False)
        assert (whole is ProtocolError) == (size > LINE_LIMIT), whole
        for at in range(line_end - 3, line_end + 3):
            assert outcome([wire[:at], wire[at:]], eof=False) == whole, at


def test_endless_trailers_and_extensions_are_refused() -> None:
    chunked = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
    with pytest.raises(ProtocolError, match="trailers larger"):
        read([chunked + b"0\r\n" + b"X-T: t\r\n" * 20_000], eof=False)
    with pytest.raises(ProtocolError, match="extensions and trailers larger"):
        read([chunked, *[b"1;" + b"e" * 4000 + b"\r\nx\r\n"] * 20], eof=False)
    with pytest.raises(ProtocolError, match="longer than"):
        read([chunked + b"1;" + b"e" * (LINE_LIMIT + 1)], eof=False)
