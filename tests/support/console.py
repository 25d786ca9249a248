"""An operator's console session for tests that post the console's forms over HTTP: its
cookie header, its CSRF token and the name the action log records it under."""

from __future__ import annotations

from dataclasses import dataclass

import asyncpg

from tenantry.api.console import action_log, epoch, session
from tests.support.api import OPERATOR_TOKEN


@dataclass(frozen=True, slots=True)
class Operator:
    headers: dict[str, str]  # the session cookie
    csrf: str
    actor: str  # who, in the action log

    def form(self, **fields: str | list[str]) -> dict[str, str | list[str]]:
        """A form as the console's page posts it: the fields and this session's token."""
        return {"csrf": self.csrf, **fields}


def operator() -> Operator:
    """A session issued as a login issues it (in the first epoch; nobody revoked any)."""
    cookie, signed = session.issue(OPERATOR_TOKEN, epoch=epoch.FIRST)
    return Operator({"Cookie": f"{session.SESSION_COOKIE}={cookie}"},
                    signed.csrf(OPERATOR_TOKEN), action_log.session_actor(signed.ident))


def operator_of(cookie: str) -> str:
    """The action log's name for the session a login set ``cookie`` for."""
    signed = session.verify(cookie, OPERATOR_TOKEN, epoch=epoch.FIRST)
    assert signed is not None
    return action_log.session_actor(signed.ident)


async def logged_actions(conn: asyncpg.Connection) -> list[tuple[str, str, str, str, str]]:
    """Every row of the action log, oldest first: (actor, action, tenant, target, outcome);
    read with the owner's connection, as the table is nobody else's."""
    rows = await conn.fetch("SELECT actor, action, tenant_id, target, outcome "
                            "FROM console_actions ORDER BY action_id")
    return [(r["actor"], r["action"], r["tenant_id"], r["target"], r["outcome"]) for r in rows]
