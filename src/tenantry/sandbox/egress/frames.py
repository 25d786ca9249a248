"""The egress frame protocol, host side. The one implementation lives in the guest's relay
(``tenantry/sandbox/guest/relay.py``), because the guest runs it as a lone script under
``python3 -I`` and cannot import a sibling module; this module re-exports it and adds the
asyncio reader the host needs. See the relay's docstring for the wire format and the flow
control rule."""

from __future__ import annotations

import asyncio

from tenantry.sandbox.guest.relay import (
    CLOSE,
    DATA,
    HEADER_SIZE,
    INITIAL_WINDOW,
    KINDS,
    MAX_CREDIT,
    MAX_PAYLOAD,
    OPEN,
    RESET,
    WINDOW,
    Frame,
    FrameDecoder,
    FrameError,
    encode_frame,
    encode_window,
    parse_header,
    window_increment,
)

__all__ = [
    "CLOSE", "DATA", "HEADER_SIZE", "INITIAL_WINDOW", "KINDS", "MAX_CREDIT", "MAX_PAYLOAD",
    "OPEN", "RESET", "WINDOW", "Frame", "FrameDecoder", "FrameError", "encode_frame",
    "encode_window", "parse_header", "read_frame", "window_increment",
]


async def read_frame(reader: asyncio.StreamReader) -> Frame | None:
    """The next frame, or None at a clean end of the stream (between frames). A stream
    that ends inside a frame, or carries a malformed one, raises FrameError."""
    try:
        header = await reader.readexactly(HEADER_SIZE)
    except asyncio.IncompleteReadError as exc:
        if not exc.partial:
            return None
        raise FrameError("the channel ended inside a frame header") from None
    kind, stream, length = parse_header(header)
    payload = b""
    if length:
        try:
            payload = await reader.readexactly(length)
        except asyncio.IncompleteReadError:
            raise FrameError("the channel ended inside a frame") from None
    return Frame(kind, stream, payload)
