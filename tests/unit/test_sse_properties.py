"""The server-sent-events parser (``tenantry.sse``) as properties, against WHATWG's "parse
an event stream" written out plainly below (``whatwg``), as each caller uses it: the
outbound client's (``tenantry.http1``: ``SseParser``, and ``SseData``, its short way for
providers' token streams) and the tenants' SDK's (``tenantry.client.SseDecoder``).

- Any stream, cut into any pieces, gives the events the reference gives for it whole: CR,
  LF and CRLF line ends (a CRLF cut between its two bytes too), a leading byte order mark,
  comments, ids with NUL (ignored), ``retry`` values, unknown fields, invalid UTF-8.
- Hostile input is bounded: a line that never ends, or an event whose data never ends, is
  refused with the parser's own error once it passes ``max_event`` bytes, not buffered;
  arbitrary bytes never raise anything else.

Hypothesis runs derandomized (the same examples on every run, no example database)."""

from __future__ import annotations

import itertools
import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tenantry.client import ClientError, SseDecoder
from tenantry.http1 import ResponseTooLarge, SseData, SseParser

CHECKS = settings(max_examples=300, derandomize=True, database=None, deadline=None,
                  suppress_health_check=[HealthCheck.too_slow])

Reference = tuple[str, str, str | None, int | None]  # event, data, id, retry


def whatwg(stream: bytes) -> list[Reference]:
    """The events of ``stream`` as received so far (WHATWG HTML, "Event stream
    interpretation"): decoded as UTF-8 with replacement, one leading U+FEFF dropped, lines
    ended by CRLF, LF or CR — a CR last of all may be half of a CRLF still to come, so it
    ends nothing yet — and what follows the last line end is not a line yet."""
    text = stream.decode("utf-8", "replace")
    text = text.removeprefix("\ufeff").removesuffix("\r")
    lines = re.split("\r\n|\r|\n", text)[:-1]
    events: list[Reference] = []
    data: list[str] = []
    event, last_id, retry = "", None, None
    for line in lines:
        if line == "":
            if data:
                events.append((event or "message", "\n".join(data), last_id, retry))
            data, event, retry = [], "", None
            continue
        if line.startswith(":"):
            continue
        name, colon, value = line.partition(":")
        if colon and value.startswith(" "):
            value = value[1:]
        if name == "data":
            data.append(value)
        elif name == "event":
            event = value
        elif name == "id" and "\0" not in value:
            last_id = value
        # Digits that do not fit 64 bits are ignored too (SseParser's docstring).
        elif name == "retry" and re.fullmatch("[0-9]{1,18}", value):
            retry = int(value)
    return events


# -- streams --------------------------------------------------------------------------------

names = st.sampled_from(["data", "data", "data", "event", "id", "retry", "", "Data", "dat",
                         "data ", "unknown", "\ufeffdata", "id\0"])
values = st.one_of(
    st.text(st.characters(blacklist_characters="\r\n", blacklist_categories=["Cs"]),
            max_size=12),
    st.sampled_from(["", " ", "  x", "x:y", "\0", "12", "1500", "\u00b2", "\u0663",
                     "9" * 19, "9" * 18, "7\0", '{"a": 1}', "[DONE]"]),
)
line_ends = st.sampled_from([b"\n", b"\r", b"\r\n"])
raw_bytes = st.sampled_from([b"\xff", b"\xe2\x82", b"\xc3", b"\xef\xbb\xbf", b"\xed\xa0\x80"])


@st.composite
def streams(draw: st.DrawFn) -> bytes:
    out = b"\xef\xbb\xbf" if draw(st.booleans()) else b""
    for _ in range(draw(st.integers(0, 25))):
        kind = draw(st.sampled_from(["field", "field", "blank", "comment", "bytes"]))
        if kind == "field":
            name = draw(names).encode()
            sep = draw(st.sampled_from([b":", b": ", b"", b":  "]))
            out += name + sep + draw(values).encode() + draw(line_ends)
        elif kind == "blank":
            out += draw(line_ends)
        elif kind == "comment":
            out += b":" + draw(values).encode() + draw(line_ends)
        else:
            out += b"data: " + draw(raw_bytes) + b"x" + draw(line_ends)
    if draw(st.booleans()):
        out += draw(line_ends)  # end the last event
    return out


@st.composite
def cut(draw: st.DrawFn, data: bytes) -> list[bytes]:
    if not data:
        return [data]
    points = sorted(set(draw(st.lists(st.integers(1, len(data)), max_size=15))))
    edges = [0, *points, len(data)]
    return [data[a:b] for a, b in itertools.pairwise(edges) if b > a]


def server_events(pieces: list[bytes]) -> list[Reference]:
    parser = SseParser()
    return [(e.event, e.data, e.id, e.retry) for piece in pieces for e in parser.feed(piece)]


def data_events(pieces: list[bytes]) -> list[tuple[str, str]]:
    parser = SseData()
    # Its short way hands over the data's own bytes: read them as the parser decodes.
    return [(name, data.decode("utf-8", "replace"))
            for piece in pieces for name, data in parser.feed(piece)]


def sdk_events(pieces: list[bytes]) -> list[Reference]:
    decoder = SseDecoder()
    return [(m.event, m.data, m.id, m.retry) for piece in pieces for m in decoder.feed(piece)]


# -- properties -----------------------------------------------------------------------------


@CHECKS
@given(st.data())
def test_any_cut_of_a_stream_gives_the_events_whatwg_gives(data: st.DataObject) -> None:
    stream = data.draw(streams())
    pieces = data.draw(cut(stream))
    reference = whatwg(stream)
    assert server_events(pieces) == reference
    assert data_events(pieces) == [(event, text) for event, text, _, _ in reference]
    assert sdk_events(pieces) == reference


@CHECKS
@given(st.data())
def test_arbitrary_bytes_never_raise_and_read_the_same_however_cut(
        data: st.DataObject) -> None:
    stream = data.draw(st.binary(max_size=400) | streams().map(lambda s: s[::-1]))
    pieces = data.draw(cut(stream))
    assert server_events(pieces) == server_events([stream]) == whatwg(stream)
    assert data_events(pieces) == data_events([stream])
    assert sdk_events(pieces) == sdk_events([stream])


def test_a_crlf_cut_between_its_bytes_is_one_line_end() -> None:
    stream = b"data: a\r\n\r\ndata: b\r\r\n"
    reference = whatwg(stream)
    assert [e[1] for e in reference] == ["a", "b"]
    for at in range(1, len(stream)):
        pieces = [stream[:at], stream[at:]]
        assert server_events(pieces) == reference
        assert data_events(pieces) == [(e, d) for e, d, _, _ in reference]
        assert sdk_events(pieces) == reference


# -- hostile input is bounded ---------------------------------------------------------------

MAX = 1000


def refusals(max_event: int) -> list[tuple[object, type[Exception]]]:
    return [(SseParser(max_event=max_event), ResponseTooLarge),
            (SseData(max_event=max_event), ResponseTooLarge),
            (SseDecoder(max_event=max_event), ClientError)]


@CHECKS
@given(st.sampled_from([b"data: ", b"event: ", b"id: ", b": ", b"x", b"\xef\xbb\xbfdata:"]),
       st.lists(st.integers(1, 300), min_size=1, max_size=40))
def test_a_line_that_never_ends_is_refused_once_past_the_cap(
        start: bytes, sizes: list[int]) -> None:
    """Refused by the piece that takes the unended line past ``max_event`` bytes: what a
    parser holds is never more than the cap and one piece."""
    for parser, error in refusals(MAX):
        held = 0
        pieces = [start, *(b"x" * n for n in sizes)]
        for piece in pieces:
            held += len(piece)
            if held - (3 if start.startswith(b"\xef") else 0) > MAX:
                with pytest.raises(error, match="larger than"):
                    parser.feed(piece)  # type: ignore[attr-defined]  # and past it
                break
            assert parser.feed(piece) == []  # type: ignore[attr-defined]


@settings(CHECKS, max_examples=150)
@given(st.lists(st.integers(0, 250), min_size=1, max_size=40), line_ends)
def test_an_event_whose_data_never_ends_is_refused(sizes: list[int], end: bytes) -> None:
    """Data lines that each end but never end their event. The parsers count an event's
    size a little differently (its data, or its lines as sent), so: refused whenever the
    data of its ended lines passes the cap, never while all its bytes stay within it."""
    lines = [b"data: " + b"x" * n + end for n in sizes]
    for parser, error in refusals(MAX):
        def feed_all(parser: object = parser) -> None:
            for line in lines:
                parser.feed(line)  # type: ignore[attr-defined]

        # A CR last may be half of a CRLF: that line has not ended yet.
        ended = sizes[:-1] if end == b"\r" else sizes
        if sum(ended) > MAX:
            with pytest.raises(error, match="larger than"):
                feed_all()
        elif sum(len(line) for line in lines) <= MAX:
            feed_all()


def test_the_default_cap_holds_against_a_slow_endless_line() -> None:
    """Sixteen MiB and one piece more, in 64 KiB pieces: each parser refuses it, having kept
    the pieces (linear work) rather than re-joining the whole line for every one."""
    piece = b"x" * (64 * 1024)
    for parser, error in refusals(16 * 1024 * 1024):
        def feed_all(parser: object = parser) -> None:
            parser.feed(b"data: ")  # type: ignore[attr-defined]
            for _ in range(16 * 16 - 1):  # 6 bytes + 255 pieces: within the cap
                assert parser.feed(piece) == []  # type: ignore[attr-defined]
            parser.feed(piece)  # type: ignore[attr-defined]  # and past it

        with pytest.raises(error, match="larger than"):
            feed_all()
