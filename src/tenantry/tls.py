"""The process's one TLS client context.

Building a context loads the CA bundle: ~20 ms of CPU each time. An HTTP client builds one
per transport unless it is given one, and a model account's client has 32 transports
(models/_http.py: shards) — 0.7 s of CPU to open one account — while the MCP client opens
one per connection. Every outgoing client that verifies certificates the default way shares
this one instead (an SSLContext may serve any number of connections)."""

from __future__ import annotations

import functools
import ssl

import httpx2


@functools.cache
def client_context() -> ssl.SSLContext:
    """Verification as httpx does it by default (its CA bundle, SSL_CERT_FILE/_DIR honoured),
    built once, on first use."""
    return httpx2.create_ssl_context()
