"""The guest's egress relay: listens on 127.0.0.1:3128 inside the sandbox (code finds it
through ``HTTP_PROXY``/``HTTPS_PROXY``) and carries every accepted TCP connection, as one
stream each, over ONE byte stream to the host, which answers as an HTTP proxy and decides
everything (``tenantry.sandbox.egress``). The sandbox has no network device: this byte
stream (a virtio-serial port, or an inherited socket for gVisor and bubblewrap) is the only
way out, and the relay is a dumb pipe — nothing here is a security check, so a code that
kills it or speaks the protocol itself gains nothing.

Standard library only, Python 3.11: it is copied into the guest beside the agent and runs as
``python3 -I /relay.py --port-name tenantry.egress`` (microVM) or ``--fd N`` (an inherited
socket). ``python3 -I`` puts no script directory on ``sys.path``, so the frame protocol lives
in this file; the host imports it from here (``tenantry.sandbox.egress.frames``): one
implementation.

Frame protocol (both directions)::

    kind: u8 | stream id: u32 | length: u32 | payload (length bytes, at most MAX_PAYLOAD)

``OPEN`` (guest→host, empty) starts stream ``id``; ids strictly increase and are never
reused, so a late frame for a finished stream is recognisable and ignored. ``DATA`` carries
bytes. ``CLOSE`` (empty) is a half-close: its sender sends no more DATA on the stream (the
TCP FIN). ``RESET`` aborts the stream both ways (the TCP RST); its payload, if any, is a
reason. ``WINDOW`` (payload: u32 increment) returns credit.

Flow control: per stream and per direction, a sender may have at most ``INITIAL_WINDOW``
bytes of DATA that the receiver has not yet handed on (to the socket of its side) and
credited back with ``WINDOW``. So a receiver never has to stop reading the shared byte
stream to wait for one slow connection — no head-of-line blocking and no deadlock between
streams — and what it buffers is bounded by the window times the streams. A receiver that
sees more than the window treats it as a protocol error.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import selectors
import socket
import struct
import sys
from collections.abc import Callable
from typing import NamedTuple

# -- the frame protocol (shared with the host) ------------------------------------------

OPEN = 1
DATA = 2
CLOSE = 3
RESET = 4
WINDOW = 5
KINDS = {OPEN: "OPEN", DATA: "DATA", CLOSE: "CLOSE", RESET: "RESET", WINDOW: "WINDOW"}

HEADER = struct.Struct("!BII")
HEADER_SIZE = HEADER.size  # 9
_U32 = struct.Struct("!I")
#: Largest payload of one frame: small enough that one stream cannot hold the shared
#: byte stream for long, large enough that headers stay a small share of the bytes.
MAX_PAYLOAD = 16 * 1024
#: Credit each side starts with, per stream and direction.
INITIAL_WINDOW = 64 * 1024
#: No sane peer ever holds more credit than this; more is a protocol error.
MAX_CREDIT = 1 << 30


class FrameError(Exception):
    """The byte stream does not carry well-formed frames: the channel is not trusted
    again."""


class Frame(NamedTuple):
    kind: int
    stream: int
    payload: bytes


def encode_frame(kind: int, stream: int, payload: bytes = b"") -> bytes:
    if kind not in KINDS or not 0 < stream <= 0xFFFFFFFF or len(payload) > MAX_PAYLOAD:
        raise ValueError(f"not a valid frame: kind={kind} stream={stream} len={len(payload)}")
    return HEADER.pack(kind, stream, len(payload)) + payload


def encode_window(stream: int, increment: int) -> bytes:
    return encode_frame(WINDOW, stream, _U32.pack(increment))


def window_increment(payload: bytes) -> int:
    (increment,) = _U32.unpack(payload)
    return int(increment)


def parse_header(header: bytes) -> tuple[int, int, int]:
    """``(kind, stream, length)`` of a frame header, or FrameError if no valid frame can
    start with it (unknown kind, stream 0, a length the kind does not allow)."""
    kind, stream, length = HEADER.unpack(header)
    if kind not in KINDS:
        raise FrameError(f"unknown frame kind {kind}")
    if stream == 0:
        raise FrameError("stream id 0 is reserved")
    if length > MAX_PAYLOAD:
        raise FrameError(f"frame of {length} bytes exceeds {MAX_PAYLOAD}")
    if kind in (OPEN, CLOSE) and length:
        raise FrameError(f"{KINDS[kind]} frame with a payload")
    if kind == WINDOW and length != _U32.size:
        raise FrameError("WINDOW frame without a 4-byte increment")
    if kind == DATA and not length:
        raise FrameError("empty DATA frame")  # EOF is CLOSE, never an empty DATA
    return int(kind), int(stream), int(length)


class FrameDecoder:
    """Incremental decoder for a non-blocking reader: feed bytes, get whole frames."""

    def __init__(self) -> None:
        self._buffer = bytearray()

    def feed(self, data: bytes) -> list[Frame]:
        self._buffer += data
        frames: list[Frame] = []
        while len(self._buffer) >= HEADER_SIZE:
            kind, stream, length = parse_header(bytes(self._buffer[:HEADER_SIZE]))
            end = HEADER_SIZE + length
            if len(self._buffer) < end:
                break
            frames.append(Frame(kind, stream, bytes(self._buffer[HEADER_SIZE:end])))
            del self._buffer[:end]
        return frames

    @property
    def pending(self) -> int:
        """Bytes of an incomplete frame held back (non-zero at EOF means truncation)."""
        return len(self._buffer)


# -- the relay --------------------------------------------------------------------------

READ = selectors.EVENT_READ
WRITE = selectors.EVENT_WRITE
DEFAULT_LISTEN = "127.0.0.1:3128"
DEFAULT_MAX_STREAMS = 64  # the host's own cap is lower; this one only spares descriptors
RECV_BYTES = 256 * 1024


class _Conn:
    """One accepted connection, as stream ``sid``."""

    __slots__ = ("credit", "host_eof", "local_eof", "received", "sid", "sock", "to_local")

    def __init__(self, sock: socket.socket, sid: int) -> None:
        self.sock = sock
        self.sid = sid
        self.credit = INITIAL_WINDOW  # what we may still send the host
        self.received = 0  # host bytes taken in and not yet credited back
        self.to_local = bytearray()  # host bytes not yet written to the socket
        self.local_eof = False  # the connection ended its sending (we sent CLOSE)
        self.host_eof = False  # the host ended its sending (we got CLOSE)


class Relay:
    """One thread, one selector: the listener, every connection and the channel."""

    def __init__(self, listener: socket.socket, open_channel: Callable[[], tuple[int, int]],
                 *, reopen: bool, max_streams: int = DEFAULT_MAX_STREAMS) -> None:
        self._listener = listener
        self._open_channel = open_channel
        self._reopen = reopen
        self._max_streams = max_streams
        self._selector = selectors.DefaultSelector()
        self._conns: dict[int, _Conn] = {}
        self._next_id = 1
        self._channel: tuple[int, int] | None = None
        self._decoder = FrameDecoder()
        self._out = bytearray()  # frames not yet written to the channel
        self._stopped = False

    # -- the loop ----------------------------------------------------------------------

    def run(self) -> None:
        self._listener.setblocking(False)
        self._selector.register(self._listener, READ, self._on_accept)
        if not self._reopen:
            self._connect_channel()
        while not self._stopped:
            self._sync_interest()
            for key, mask in self._selector.select():
                callback: Callable[[int], None] = key.data
                callback(mask)
                if self._stopped:
                    break

    def _sync_interest(self) -> None:
        """Read a connection only while the host has given credit for it, write it only
        while there is something for it: backpressure without a queue of our own."""
        for conn in list(self._conns.values()):
            mask = (READ if conn.credit > 0 and not conn.local_eof else 0) | (
                WRITE if conn.to_local else 0)
            self._want(conn.sock.fileno(), mask, self._conn_callback(conn))
        if self._channel is not None:
            rfd, wfd = self._channel
            if rfd == wfd:
                self._want(rfd, READ | (WRITE if self._out else 0), self._on_channel)
            else:
                self._want(rfd, READ, self._on_channel_read)
                self._want(wfd, WRITE if self._out else 0, self._on_channel_write)

    def _want(self, fd: int, mask: int, callback: Callable[[int], None]) -> None:
        key = self._selector.get_map().get(fd)
        if key is None:
            if mask:
                self._selector.register(fd, mask, callback)
        elif not mask:
            self._selector.unregister(fd)
        elif key.events != mask:
            self._selector.modify(fd, mask, callback)

    def _conn_callback(self, conn: _Conn) -> Callable[[int], None]:
        def on_event(mask: int) -> None:
            if mask & WRITE and conn.sid in self._conns:
                self._write_local(conn)
            if mask & READ and conn.sid in self._conns:
                self._read_local(conn)
        return on_event

    # -- the channel -------------------------------------------------------------------

    def _connect_channel(self) -> bool:
        try:
            rfd, wfd = self._open_channel()
        except OSError as exc:
            print(f"relay: cannot open the channel: {exc}", file=sys.stderr, flush=True)
            if not self._reopen:
                self._stopped = True
            return False
        for fd in {rfd, wfd}:
            os.set_blocking(fd, False)
        self._channel = (rfd, wfd)
        self._decoder = FrameDecoder()
        self._out.clear()
        return True

    def _lose_channel(self) -> None:
        """The host went away: every connection ends abruptly (their bytes may be lost),
        and the relay either waits for the next connection to reopen the port (a
        device) or ends (an inherited descriptor cannot come back)."""
        for conn in list(self._conns.values()):
            self._drop(conn, abort=True)
        if self._channel is not None:
            for fd in set(self._channel):
                if fd in self._selector.get_map():
                    self._selector.unregister(fd)
                with contextlib.suppress(OSError):
                    os.close(fd)
            self._channel = None
        self._out.clear()
        if not self._reopen:
            self._stopped = True

    def _on_channel(self, mask: int) -> None:
        if mask & WRITE:
            self._on_channel_write(mask)
        if mask & READ and self._channel is not None:
            self._on_channel_read(mask)

    def _on_channel_write(self, mask: int) -> None:
        if self._channel is None or not self._out:
            return
        try:
            written = os.write(self._channel[1], self._out)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self._lose_channel()
            return
        del self._out[:written]

    def _on_channel_read(self, mask: int) -> None:
        if self._channel is None:
            return
        try:
            data = os.read(self._channel[0], RECV_BYTES)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:
            self._lose_channel()
            return
        try:
            frames = self._decoder.feed(data)
        except FrameError as exc:
            print(f"relay: bad frame from the host: {exc}", file=sys.stderr, flush=True)
            self._lose_channel()
            return
        for frame in frames:
            self._on_frame(frame)

    def _send(self, frame: bytes) -> None:
        self._out += frame

    def _on_frame(self, frame: Frame) -> None:
        conn = self._conns.get(frame.stream)
        if conn is None:
            return  # a stream that already ended here: its late frames mean nothing
        if frame.kind == DATA:
            if conn.host_eof or conn.received + len(frame.payload) > INITIAL_WINDOW:
                self._reset(conn)  # the host broke the protocol for this stream
                return
            conn.received += len(frame.payload)
            conn.to_local += frame.payload
            self._write_local(conn)
        elif frame.kind == CLOSE:
            conn.host_eof = True
            self._write_local(conn)
        elif frame.kind == RESET:
            self._drop(conn, abort=True)
        elif frame.kind == WINDOW:
            conn.credit += window_increment(frame.payload)
            if conn.credit > MAX_CREDIT:
                self._reset(conn)
        # OPEN from the host has no meaning: streams start here

    # -- connections -------------------------------------------------------------------

    def _on_accept(self, mask: int) -> None:
        try:
            sock, _ = self._listener.accept()
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:  # EMFILE and friends: this connection only
            print(f"relay: accept failed: {exc}", file=sys.stderr, flush=True)
            return
        if len(self._conns) >= self._max_streams or (
                self._channel is None and not (self._reopen and self._connect_channel())):
            _abort(sock)
            return
        sock.setblocking(False)
        conn = _Conn(sock, self._next_id)
        self._next_id += 1
        self._conns[conn.sid] = conn
        self._send(encode_frame(OPEN, conn.sid))

    def _read_local(self, conn: _Conn) -> None:
        try:
            data = conn.sock.recv(min(conn.credit, MAX_PAYLOAD))
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self._reset(conn)
            return
        if not data:
            conn.local_eof = True
            self._send(encode_frame(CLOSE, conn.sid))
            self._maybe_done(conn)
            return
        conn.credit -= len(data)
        self._send(encode_frame(DATA, conn.sid, data))

    def _write_local(self, conn: _Conn) -> None:
        if conn.to_local:
            try:
                sent = conn.sock.send(conn.to_local)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                self._reset(conn)
                return
            del conn.to_local[:sent]
            # Credit goes back as soon as the bytes are the kernel's, not ours.
            conn.received -= sent
            self._send(encode_window(conn.sid, sent))
        if conn.host_eof and not conn.to_local:
            with contextlib.suppress(OSError):
                conn.sock.shutdown(socket.SHUT_WR)
            self._maybe_done(conn)

    def _maybe_done(self, conn: _Conn) -> None:
        if conn.local_eof and conn.host_eof and not conn.to_local:
            self._drop(conn, abort=False)

    def _reset(self, conn: _Conn) -> None:
        self._send(encode_frame(RESET, conn.sid))
        self._drop(conn, abort=True)

    def _drop(self, conn: _Conn, *, abort: bool) -> None:
        self._conns.pop(conn.sid, None)
        if conn.sock.fileno() in self._selector.get_map():
            self._selector.unregister(conn.sock)
        if abort:
            _abort(conn.sock)  # the code sees a reset, not a clean end: bytes may be missing
        else:
            conn.sock.close()


def _abort(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


def _port_by_name(name: str) -> str:
    """The /dev/vportNpM of the virtio-serial port the host named (probe order decides
    the number, the name is stable)."""
    base = "/sys/class/virtio-ports"
    for entry in sorted(os.listdir(base)):
        try:
            with open(os.path.join(base, entry, "name")) as f:
                if f.read().strip() == name:
                    return os.path.join("/dev", entry)
        except OSError:
            continue
    raise FileNotFoundError(f"no virtio-serial port named {name}")


def _listener(address: str) -> socket.socket:
    host, _, port = address.rpartition(":")
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host or "127.0.0.1", int(port)))
    sock.listen(128)
    return sock


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Tenantry guest egress relay")
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--channel", help="character device to the host (/dev/vportNpM)")
    where.add_argument("--port-name", help="virtio-serial port name (e.g. tenantry.egress)")
    where.add_argument("--fd", type=int, help="inherited descriptor to the host (a socket)")
    parser.add_argument("--write-fd", type=int,
                        help="separate descriptor to write to (when --fd is a pipe's end)")
    parser.add_argument("--listen", default=DEFAULT_LISTEN, help="HOST:PORT (port 0: any)")
    parser.add_argument("--max-streams", type=int, default=DEFAULT_MAX_STREAMS)
    args = parser.parse_args(argv)
    try:  # like the agent: the OOM killer takes the code, never the way out
        with open("/proc/self/oom_score_adj", "w") as f:
            f.write("-1000")
    except OSError:
        pass

    open_channel: Callable[[], tuple[int, int]]
    if args.fd is not None:
        fds = (args.fd, args.write_fd if args.write_fd is not None else args.fd)

        def open_channel() -> tuple[int, int]:
            return fds
    else:
        def open_channel() -> tuple[int, int]:
            # Opened when a connection needs it, not at boot: the host end of a port is
            # attached when a run is bound, and a port without its host reads as EOF.
            path = args.channel or _port_by_name(args.port_name)
            fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
            return fd, fd

    listener = _listener(args.listen)
    host, port = listener.getsockname()[:2]
    print(f"relay listening on {host}:{port}", flush=True)  # the readiness signal
    Relay(listener, open_channel, reopen=args.fd is None, max_streams=args.max_streams).run()


if __name__ == "__main__":
    main()
