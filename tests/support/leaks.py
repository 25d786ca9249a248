"""Where a credential must never be found: the places a user, an operator or a model can
read, gathered for the tests that check no token leaked into any of them."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import asyncpg
import orjson
import pytest

from tests.support.worker import Fakes


async def readable_places(admin_conn: asyncpg.Connection, fakes: Fakes,
                          caplog: pytest.LogCaptureFixture) -> dict[str, str]:
    """Every run's events, the audit log, the sealed OAuth rows (sealed: no token in
    clear), every request the model got (prompts and headers) and every log record but the
    tool server's own (the SDK's ``mcp.*`` loggers, which may know its tokens)."""
    return {
        "run_events": await admin_conn.fetchval(
            "SELECT string_agg(data::text, ' ') FROM run_events") or "",
        "audit_log": await admin_conn.fetchval(
            "SELECT string_agg(t::text, ' ') FROM audit_log t") or "",
        "tool_server_oauth (sealed)": await admin_conn.fetchval(
            "SELECT string_agg(t::text || coalesce(encode(access_token, 'escape'), '')"
            " || coalesce(encode(refresh_token, 'escape'), ''), ' ') FROM tool_server_oauth t")
        or "",
        "model requests": " ".join(r.body.decode() + orjson.dumps(r.headers).decode()
                                   for r in fakes.model.requests),
        "logs": "\n".join(f"{rec.getMessage()} {rec.__dict__}" for rec in caplog.records
                          if not rec.name.startswith("mcp")),
    }


def assert_no_token_in(places: Mapping[str, str], tokens: Iterable[str]) -> None:
    tokens = list(tokens)
    for place, text in places.items():
        leaked = [t for t in tokens if t in text]
        assert not leaked, f"{len(leaked)} token(s) leaked into {place}"
