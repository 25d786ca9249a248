"""The MCP wire (``tenantry.tools._mcp_wire``) as properties over what a hostile tool server
can send, without a socket: any JSON value as a message, any bytes as an answer body.

- Every message the server sends is either the answer to our request, something the
  session handles (a notification, a request it answers), or a :class:`BadMessage` /
  :class:`RpcError` the gateway turns into a tool error; nothing else is ever raised.
- However many messages a server packs into one answer, the session handles at most the
  exchange's allowance of them and answers at most its allowance of requests: the rest
  ends the exchange.
- Any bytes as an answer body are parsed, refused as too dense, or refused as not JSON:
  a document parsed from more than 64 KiB never has more than one value per 8 bytes.

Hypothesis runs derandomized (the same examples on every run, no example database)."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tenantry import http1
from tenantry.jsonutil import BYTES_PER_VALUE, DENSITY_CHECKED_ABOVE, JsonTooDense, loads_untrusted
from tenantry.tools import _mcp_wire as wire

CHECKS = settings(max_examples=300, derandomize=True, database=None, deadline=None,
                  suppress_health_check=[HealthCheck.too_slow])

OUR_ID = 7

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False)
    | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=8), inner,
                                                                max_size=5),
    max_leaves=20)

#: Messages shaped like JSON-RPC, with every field any type: answers (ours or not),
#: notifications and server requests, well or badly formed.
rpc_messages = st.fixed_dictionaries({"jsonrpc": st.just("2.0")}, optional={
    "id": st.sampled_from([OUR_ID, OUR_ID + 1, "7", None]) | json_values,
    "method": st.sampled_from(["ping", "sampling/createMessage", "notifications/progress",
                               "notifications/tools/list_changed"]) | json_values,
    "params": json_values,
    "result": json_values | st.fixed_dictionaries({"content": json_values}),
    "error": json_values | st.fixed_dictionaries({"code": json_values,
                                                  "message": json_values}),
})


class Session(wire.Session):
    """A session whose replies to the server are counted, not POSTed; with ``slow``, each
    reply stays in flight (as a real one does while the answer's messages are read)."""

    def __init__(self, *, slow: bool = False) -> None:
        super().__init__("http://127.0.0.1:9/mcp", http1.HttpClient(), http1.HttpClient())
        self.replies = 0
        self.slow = slow
        self.notified: list[str] = []

    def _spawn(self, coroutine: Any) -> None:
        coroutine.close()  # the reply's POST: not sent here
        self.replies += 1
        if self.slow:
            self._background.add(coroutine)

    def on_notification(self, method: str, params: Any) -> None:
        self.notified.append(method)


def _allowance() -> Any:
    return wire.Allowance(wire.MAX_MESSAGES_PER_EXCHANGE,
                           wire.MAX_SERVER_REQUESTS_PER_EXCHANGE, "call")


@CHECKS
@given(st.lists(rpc_messages | json_values, max_size=30))
def test_any_message_is_handled_answered_or_refused_as_the_servers_fault(
        messages: list[Any]) -> None:
    session, allowance = Session(), _allowance()
    for message in messages:
        try:
            result = session._dispatch(message, OUR_ID, allowance, ())
        except (wire.BadMessage, wire.RpcError):
            return  # the exchange ends here, as a tool error or an RPC error
        if result is not None:
            assert isinstance(result, dict)
            assert isinstance(message, dict) and message.get("id") == OUR_ID
            return
    assert session.replies <= wire.MAX_SERVER_REQUESTS_PER_EXCHANGE


@CHECKS
@given(st.integers(min_value=0, max_value=3 * wire.MAX_MESSAGES_PER_EXCHANGE),
       st.sampled_from(["notifications", "requests", "requests answered at once"]))
def test_a_flood_in_one_answer_is_cut_at_the_exchanges_allowance(count: int,
                                                                  kind: str) -> None:
    session, allowance = Session(slow=kind == "requests"), _allowance()
    bound = {"notifications": wire.MAX_MESSAGES_PER_EXCHANGE,
             "requests": wire.MAX_REPLIES_IN_FLIGHT,
             "requests answered at once": wire.MAX_SERVER_REQUESTS_PER_EXCHANGE}[kind]
    handled = 0
    with pytest.raises(wire.BadMessage) if count > bound else _nothing():
        for i in range(count):
            message = ({"jsonrpc": "2.0", "method": "notifications/progress"}
                       if kind == "notifications"
                       else {"jsonrpc": "2.0", "id": 1000 + i, "method": "ping"})
            session._dispatch(message, OUR_ID, allowance, ())
            handled += 1
    assert handled == min(count, bound)
    assert session.replies == (0 if kind == "notifications" else handled)


@CHECKS
@given(st.binary(max_size=512) | st.builds(lambda unit, n: unit * n,
                                           st.sampled_from([b"[],", b'"a",', b"{},", b"1,",
                                                            b'"\\"', b"[[[", b'{"k":']),
                                           st.integers(min_value=0, max_value=40_000)))
def test_any_answer_body_is_parsed_or_refused_and_parsed_ones_are_sparse(body: bytes) -> None:
    for document in (body, b"[" + body.removesuffix(b",") + b"]"):
        try:
            value = loads_untrusted(document)
        except (JsonTooDense, orjson.JSONDecodeError):
            continue
        if len(document) > DENSITY_CHECKED_ABOVE:
            assert _values(value) <= len(document) // BYTES_PER_VALUE + 1


def _values(value: Any) -> int:
    if isinstance(value, list):
        return 1 + sum(_values(v) for v in value)
    if isinstance(value, dict):
        return 1 + sum(_values(v) for v in value.values())
    return 1


class _nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *_: object) -> None:
        return None
