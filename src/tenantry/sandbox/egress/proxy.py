"""Sandbox egress: the host-side HTTP proxy behind a sandbox's relay.

A sandbox has no network device. When the tenant's agent spec names hosts
(``sandbox.egress``), code in the sandbox reaches exactly those hosts through the guest's
relay (``sandbox/guest/relay.py``, on 127.0.0.1:3128, code gets ``HTTP_PROXY``/``HTTPS_PROXY``),
which carries each TCP connection as a stream over one byte stream to ``EgressProxy.serve``
here. For each stream the host reads one request — ``CONNECT host:port`` (HTTPS and any
other TLS) or an absolute-URI plain HTTP request (``GET http://host/path``) — and:

1. checks ``host:port`` against the allow-list (``EgressPolicy.check``);
2. resolves the name ON THE HOST (numeric forms such as ``2130706433`` or ``0x7f.1`` are
   read as the address they spell, never sent to DNS) and refuses if ANY address is not a
   public unicast one (``EgressPolicy.vet_addresses``): loopback, RFC 1918 and fc00::/7,
   link-local (169.254/16 with cloud metadata, fe80::/10), CGNAT 100.64/10, multicast,
   unspecified, reserved and other special-purpose ranges, and the same hidden inside
   IPv4-mapped, NAT64 (64:ff9b::/96) or 6to4 addresses;
3. connects to a vetted address itself — never re-resolving the name, so a DNS answer that
   changes between check and use (rebinding) changes nothing;
4. answers ``200 Connection established`` (CONNECT) or forwards the request with its
   ``Host`` taken from the URL and ``Connection: close``, then splices bytes both ways
   under an idle timeout and a per-stream byte cap.

A refusal answers ``403`` (``400`` for a request that is not a proxy request, ``502``/``504``
when an allowed host cannot be resolved or reached) with a one-line reason in the status
line and the body, so ``Tunnel connection failed: 403 Forbidden (tenantry egress: ...)`` is
what Python code prints. Every decision is one structured log record (tenant, run, host,
port, decision, reason). Nothing but the vetted connection leaves the host.

Allow-list entries (``EgressPolicy.hosts``): ``name`` allows ports 80 and 443 (what HTTP
and HTTPS use: naming a host is consent to talk HTTP(S) to it, not to every service it
runs); ``name:port`` allows exactly that port. Names match case-insensitively, a trailing
dot ignored. ``*.example.com`` allows any subdomain at any depth but not ``example.com``
itself (list both to have both); the suffix must have at least two labels, so ``*.com``
is rejected. Wildcards are supported because whole API families live under one domain
(``*.s3.amazonaws.com``); the tenant API's host pattern does not accept ``*`` yet, so today
they can only come from code. IP literals are allowed only by the same literal and are
vetted like any resolved address.

Testing the allowed path honestly. Every address a test can run a server on here is one
the vetting must refuse (loopback, or private/special ranges), and flipping the vetting off
for tests would leave the one path that matters untested. So the policy is never relaxed.
Instead ``EgressProxy`` takes two injection points, both constructor arguments that no
configuration reaches: ``resolver`` (name → addresses, so a test can answer a public
address, or a loopback one to prove the refusal) and ``connector`` (vetted address → open
connection). A test's connector records the vetted address it was asked for — proving the
proxy dials exactly what it vetted — and then opens its local server. The default connector
is a plain non-resolving TCP connect of a literal address.

Every refusal of an egress attempt (a host off the allow-list, an internal or metadata
address) is also kept per (tenant, run) as an ``EgressRefusal`` until whoever records it
takes it (``take``): a run's tool step after each built-in tool call (``EgressRefused`` in
the run's log), the activity dispatcher when an attempt ends (on the attempt). The proxy
itself writes nothing to a run. What is kept is what the code asked for (host, port) and a
reason code; never the addresses a name resolved to. What it keeps is bounded whether or
not anyone takes it (``refusals.py``): at most 1,000 per key, 4,096 across all keys (the
oldest dropped past that, still counted for their key), 2,048 keys — under 4 MiB per
process.

Known limits: TLS through CONNECT is opaque, so a host that serves many names on one
address (a CDN) can be asked for another name inside TLS (domain fronting); only plain HTTP
has its ``Host`` pinned here. Requests after the first on a plain-HTTP connection go to the
same vetted upstream (``Connection: close`` ends it there), never elsewhere.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from tenantry.sandbox.egress.frames import (
    CLOSE,
    DATA,
    MAX_CREDIT,
    MAX_PAYLOAD,
    OPEN,
    RESET,
    WINDOW,
    Frame,
    FrameError,
    encode_frame,
    read_frame,
    window_increment,
)
from tenantry.sandbox.egress.policy import (
    EgressPolicy,
    IPAddress,
    Refusal,
    Resolver,
    address_refusal,
    authority,
    literal_address,
    normalize_host,
    printable,
    resolve_and_vet,
    system_resolver,
)
from tenantry.sandbox.egress.refusals import (
    INTERNAL_ADDRESS,
    METADATA_ADDRESS,
    NOT_ALLOWED,
    EgressRefusal,
    HeldRefusals,
    KeptRefusals,
    TakenRefusals,
)
from tenantry.sandbox.egress.request import (
    BadRequest,
    parse_request_head,
    refusal_response,
)
from tenantry.sandbox.egress.streams import (
    CapReached,
    Mux,
    ProtocolViolation,
    Stream,
    Traffic,
    both,
)

log = logging.getLogger(__name__)

#: ``(vetted address, port) -> connection``; must not resolve anything.
Connector = Callable[[IPAddress, int],
                     Awaitable[tuple[asyncio.StreamReader, asyncio.StreamWriter]]]


def _reason_code(host: str, port: int, policy: EgressPolicy, refusal: Refusal) -> str | None:
    """The code of a refused egress attempt; None for refusals that are not about where the
    code tried to go (a malformed request, a timeout, an allowed host that is down)."""
    if refusal.status != 403:
        return None
    if policy.check(host, port) is None:
        return INTERNAL_ADDRESS  # allowed by name, but it resolves inside
    name = normalize_host(host)
    literal = literal_address(name) if name is not None else None
    kind = address_refusal(literal) if literal is not None else None
    if kind is None:
        return NOT_ALLOWED
    return METADATA_ADDRESS if "link-local" in kind else INTERNAL_ADDRESS


# -- the proxy --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class EgressLimits:
    max_streams: int = 32  # connections at once per sandbox; more are answered 503
    max_stream_bytes: int = 256 * 1024 * 1024  # both directions together, per connection
    idle_timeout_s: float = 120.0  # no byte either way for this long ends a connection
    head_timeout_s: float = 30.0  # to send the first request head (and to go away after a refusal)
    connect_timeout_s: float = 15.0  # to resolve, and then to connect
    max_head_bytes: int = 16 * 1024
    max_drain_bytes: int = 1024 * 1024  # read and dropped after a refusal, at most


async def _default_connector(address: IPAddress, port: int
                             ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    family = socket.AF_INET6 if address.version == 6 else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setblocking(False)
        # A literal address on our own socket: nothing here can resolve a name again.
        await asyncio.get_running_loop().sock_connect(sock, (str(address), port))
    except BaseException:
        sock.close()
        raise
    return await asyncio.open_connection(sock=sock)


class EgressProxy:
    """The host side of every sandbox's egress channel. One instance serves any number of
    sandboxes; each ``serve`` call is one sandbox's channel, with its run's policy.

    ``resolver`` and ``connector`` exist for tests (see the module docstring); the platform
    passes neither, and no setting reaches them. Refused attempts are kept until taken
    (``take``), under 4 MiB in all whether or not anyone takes them (``refusals.py``)."""

    def __init__(self, *, limits: EgressLimits | None = None, resolver: Resolver | None = None,
                 connector: Connector | None = None) -> None:
        self.limits = limits or EgressLimits()
        self._resolver = resolver or system_resolver
        self._connector = connector or _default_connector
        self._refused = KeptRefusals()

    def take(self, tenant: str, run: str) -> TakenRefusals:
        """The egress attempts refused for this (tenant, run) since the last take — the
        ones kept, oldest first, and a count by reason code of those refused but not kept;
        freed here."""
        return self._refused.take(tenant, run)

    def take_refusals(self, tenant: str, run: str) -> tuple[list[EgressRefusal], int]:
        """``take``, as the run's tool step reads it: the refusals kept, and how many more
        were refused but not kept."""
        taken = self._refused.take(tenant, run)
        return list(taken.kept), taken.total - len(taken.kept)

    def held(self, tenant: str | None = None) -> HeldRefusals:
        """What is held now, not yet taken (of one tenant, or of all)."""
        return self._refused.held(tenant)

    @property
    def refusals_lost(self) -> int:
        """Refused attempts dropped with their whole (tenant, run) before anyone took them
        (past ``refusals.MAX_RUNS_KEPT``): counted nowhere else."""
        return self._refused.lost

    def _note_refusal(self, context: dict[str, str], refusal: EgressRefusal) -> None:
        self._refused.note(context.get("tenant_id", ""), context.get("run_id", ""), refusal)

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                    policy: EgressPolicy, *, labels: dict[str, str]) -> None:
        """Serve one sandbox's multiplexed channel until it ends (EOF, a broken channel or
        a protocol violation by the guest); every connection still open then is closed.
        ``labels`` name the sandbox in the logs: ``tenant`` and ``run``, and any others."""
        mux = Mux(writer)
        context = _log_context(labels)
        try:
            while True:
                frame = await read_frame(reader)
                if frame is None:
                    break
                await self._dispatch(mux, frame, policy, context)
        except (FrameError, ProtocolViolation) as exc:
            log.warning("egress channel closed: the guest broke the protocol",
                        extra={**context, "reason": str(exc)})
        except (ConnectionError, OSError):
            pass  # the channel broke: the sandbox is gone or going
        finally:
            for task in list(mux.tasks):
                task.cancel()
            await asyncio.gather(*mux.tasks, return_exceptions=True)
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _dispatch(self, mux: Mux, frame: Frame, policy: EgressPolicy,
                        context: dict[str, str]) -> None:
        kind, sid, payload = frame
        if kind == OPEN:
            if sid <= mux.last_id:
                raise ProtocolViolation(f"stream {sid} opened out of order")
            mux.last_id = sid
            if len(mux.streams) >= self.limits.max_streams:
                reason = f"more than {self.limits.max_streams} connections at once"
                log.info("egress refused", extra={**context, "stream": sid,
                                                  "decision": "refused", "reason": reason})
                # Not tracked: its later frames are ignored like any finished stream's.
                await mux.send(encode_frame(DATA, sid, refusal_response(503, reason)))
                await mux.send(encode_frame(CLOSE, sid))
                return
            stream = Stream(mux, sid, self.limits.max_head_bytes)
            mux.streams[sid] = stream
            task = asyncio.create_task(self._run_stream(stream, policy, context))
            stream.task = task
            mux.tasks.add(task)
            task.add_done_callback(mux.tasks.discard)
            return
        live = mux.streams.get(sid)
        if live is None:
            if sid > mux.last_id:
                raise ProtocolViolation(f"frame for stream {sid}, never opened")
            return  # a stream that already ended: late frames mean nothing
        if kind == DATA:
            live.on_data(payload)
        elif kind == CLOSE:
            live.guest_closed = True
            live.inbound.feed_eof()
        elif kind == RESET:
            live.guest_reset = True
            if live.task is not None:
                live.task.cancel()
        elif kind == WINDOW:
            live.credit += window_increment(payload)
            if live.credit > MAX_CREDIT:
                raise ProtocolViolation(f"stream {sid}: credit past any window")
            live.credit_changed.set()

    async def _run_stream(self, stream: Stream, policy: EgressPolicy,
                          context: dict[str, str]) -> None:
        context = {**context, "stream": str(stream.sid)}
        try:
            await self._serve_stream(stream, policy, context)
        except (OSError, asyncio.IncompleteReadError, CapReached):
            pass  # a side went away, idled out (TimeoutError) or hit the cap: reset below
        except Exception:
            log.exception("egress stream failed", extra=context)
        finally:
            stream.mux.streams.pop(stream.sid, None)
            if not (stream.guest_closed and stream.host_closed) and not stream.guest_reset:
                stream.mux.send_nowait(encode_frame(RESET, stream.sid))

    async def _serve_stream(self, stream: Stream, policy: EgressPolicy,
                            context: dict[str, str]) -> None:
        limits = self.limits
        try:
            async with asyncio.timeout(limits.head_timeout_s):
                head = await stream.inbound.readuntil(b"\r\n\r\n")
        except asyncio.IncompleteReadError:
            await stream.close()  # the code closed without asking for anything
            return
        except asyncio.LimitOverrunError:
            await self._refuse(stream, context, None, Refusal(
                400, f"request head larger than {limits.max_head_bytes} bytes"))
            return
        except TimeoutError:
            await self._refuse(stream, context, None, Refusal(408, "no request received"))
            return
        await stream.consumed(len(head))
        try:
            request = parse_request_head(head)
        except BadRequest as exc:
            await self._refuse(stream, context, None, Refusal(400, str(exc)))
            return
        target = {"egress_host": request.host, "egress_port": str(request.port)}
        try:
            async with asyncio.timeout(limits.connect_timeout_s):
                vetted = await resolve_and_vet(request.host, request.port, policy,
                                               resolver=self._resolver)
        except TimeoutError:
            vetted = Refusal(504, f"resolving {request.host} timed out")
        if isinstance(vetted, Refusal):
            code = _reason_code(request.host, request.port, policy, vetted)
            if code is not None:  # noted before the code can read the answer
                self._note_refusal(context, EgressRefusal(
                    printable(request.host), request.port, code))
            await self._refuse(stream, context, target, vetted)
            return
        log.info("egress allowed", extra={**context, **target, "decision": "allowed",
                                          "reason": "on the allow-list; addresses public",
                                          "addresses": ",".join(map(str, vetted))})
        try:
            upstream = await self._connect(vetted, request.port)
        except (OSError, TimeoutError) as exc:
            reason = (f"{authority(request.host, request.port)} could not be reached "
                      f"({printable(str(exc) or type(exc).__name__)})")
            await self._refuse(stream, context, target, Refusal(502, reason), log_it=False)
            log.info("egress connect failed", extra={**context, **target, "reason": reason})
            return
        up_reader, up_writer, address = upstream
        started = time.monotonic()
        outcome = "closed"
        traffic = Traffic(limits.max_stream_bytes)
        try:
            if request.tunnel:
                await stream.send(b"HTTP/1.1 200 Connection established\r\n\r\n")
            else:
                up_writer.write(request.forward_head)
            await self._splice(stream, up_reader, up_writer, traffic)
        except CapReached:
            outcome = f"byte cap of {limits.max_stream_bytes} reached"
            raise
        except TimeoutError:
            outcome = f"idle for {limits.idle_timeout_s:g} s"
            raise
        except BaseException:
            outcome = "reset"
            raise
        finally:
            up_writer.close()
            log.info("egress connection ended", extra={
                **context, **target, "address": str(address), "outcome": outcome,
                "duration_ms": round((time.monotonic() - started) * 1000),
                "bytes_up": traffic.up, "bytes_down": traffic.down})

    async def _connect(self, addresses: Sequence[IPAddress], port: int
                       ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter, IPAddress]:
        """The first vetted address that answers, in the resolver's order."""
        error: BaseException | None = None
        async with asyncio.timeout(self.limits.connect_timeout_s):
            for address in addresses:
                try:
                    reader, writer = await self._connector(address, port)
                except OSError as exc:
                    error = exc
                    continue
                return reader, writer, address
        raise error or OSError("no address")

    async def _refuse(self, stream: Stream, context: dict[str, str],
                      target: dict[str, str] | None, refusal: Refusal, *,
                      log_it: bool = True) -> None:
        if log_it:
            log.info("egress refused", extra={**context, **(target or {}),
                                              "decision": "refused", "status": refusal.status,
                                              "reason": refusal.reason})
        await stream.send(refusal_response(refusal.status, refusal.reason))
        await stream.close()
        # The code has to read the answer before it goes: keep taking (and dropping) what
        # it still sends until it closes, so it is never reset mid-read.
        drained = 0
        async with asyncio.timeout(self.limits.head_timeout_s):
            while data := await stream.inbound.read(MAX_PAYLOAD):
                drained += len(data)
                if drained > self.limits.max_drain_bytes:
                    raise CapReached
                await stream.consumed(len(data))

    async def _splice(self, stream: Stream, up_reader: asyncio.StreamReader,
                      up_writer: asyncio.StreamWriter, traffic: Traffic) -> None:
        """Bytes both ways until both sides have ended theirs; raises TimeoutError when
        nothing moved for the idle timeout and CapReached past the byte cap."""
        loop = asyncio.get_running_loop()
        idle = self.limits.idle_timeout_s
        async with asyncio.timeout(idle) as deadline:
            traffic.touch = lambda: deadline.reschedule(loop.time() + idle)

            async def guest_to_upstream() -> None:
                while data := await stream.inbound.read(65536):
                    traffic.add(len(data), up=True)
                    up_writer.write(data)
                    await up_writer.drain()
                    await stream.consumed(len(data))
                if up_writer.can_write_eof():
                    up_writer.write_eof()  # the code's half-close, passed on

            async def upstream_to_guest() -> None:
                while data := await up_reader.read(MAX_PAYLOAD):
                    traffic.add(len(data), up=False)
                    await stream.send(data)
                await stream.close()

            await both(guest_to_upstream(), upstream_to_guest())


def _log_context(labels: dict[str, str]) -> dict[str, str]:
    context = {"tenant_id": labels.get("tenant", ""), "run_id": labels.get("run", "")}
    context.update({f"label_{k}": v for k, v in labels.items() if k not in ("tenant", "run")})
    return context
