"""An operator's console session for tests that post the console's forms over HTTP: its
cookie header, its CSRF token and the name the action log records it under; and a run
waiting for an approval, for the consoles' browser tests (the operator's and the
tenant's)."""

from __future__ import annotations

from dataclasses import dataclass

import asyncpg

from tenantry.api.console import action_log, epoch, session
from tests.support.api import OPERATOR_TOKEN, Api
from tests.support.scripts import answer, call, saying, scripted
from tests.support.waiting import until
from tests.support.worker import Fakes


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


Logged = tuple[str, str, str | None, str, str]


async def logged_actions(conn: asyncpg.Connection) -> list[Logged]:
    """The action log's console actions (by a session or a named operator), oldest first:
    (actor, action, tenant, target, outcome); read with the owner's connection, as the table
    is nobody else's. The operator API's (every change a test's setup makes through it
    too): ``api_actions``."""
    return await _logged(conn, "actor <> 'operator API'")


async def api_actions(conn: asyncpg.Connection) -> list[Logged]:
    """The action log's entries by the operator API, oldest first, as ``logged_actions``."""
    return await _logged(conn, "actor = 'operator API'")


async def _logged(conn: asyncpg.Connection, which: str) -> list[Logged]:
    rows = await conn.fetch("SELECT actor, action, tenant_id, target, outcome "
                            f"FROM console_actions WHERE {which} ORDER BY action_id")
    return [(r["actor"], r["action"], r["tenant_id"], r["target"], r["outcome"]) for r in rows]


REFUND = "refund 120 EUR to order-9"
AGENT = "refund-bot"
ASKED = "Order 9 never arrived.\nPlease refund it."  # the run's input: two lines
SAID = "The parcel is lost in transit, so I will refund the order in full."


async def waiting_run(api: Api, fakes: Fakes) -> tuple[str, dict[str, str], str, str]:
    """A run of a fresh tenant's agent ``AGENT``, asked ``ASKED``, waiting for approval of
    one refund the model asked for after saying ``SAID``: tenant, its key's headers, run
    id, approval id."""
    tenant, h = await api.tenant("Acme Refunds")
    await api.tool_server(tenant, fakes.mcp.url)
    agent = await api.agent(h, AGENT, tools=["effect"], needs_approval=["effect"])
    run_id = await api.start(h, agent, scripted(saying(SAID, call("effect", note=REFUND)),
                                                answer("{last_tool_result}"), text=ASKED))
    found: list[str] = []

    async def pending() -> bool:
        page = (await api.client.get("/v1/approvals", params={"status": "pending"},
                                     headers=h)).json()
        found[:] = [a["approval_id"] for a in page["data"]]
        return bool(found)

    await until(pending, "the run asks for approval", 30)
    return tenant, h, run_id, found[0]
