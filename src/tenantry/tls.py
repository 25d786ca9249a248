"""The process's one TLS client context.

Building a context loads the CA bundle: ~20 ms of CPU each time. httpx builds one per
transport unless it is given one (a model account's client once had 32 transports: 0.7 s of
CPU to open one account). Every outgoing client that verifies certificates the default way
— tenantry.http1's, the httpx clients that remain — shares this one instead (an SSLContext
may serve any number of connections)."""

from __future__ import annotations

import functools
import ssl


@functools.cache
def client_context() -> ssl.SSLContext:
    """Verification as httpx does it by default (its CA bundle, SSL_CERT_FILE/_DIR honoured),
    built once, on first use. httpx is imported here, not with the module: the worker's
    outgoing calls no longer use it, and importing it costs a process's start."""
    import httpx2

    return httpx2.create_ssl_context()
