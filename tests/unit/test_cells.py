"""The pure pieces of cells and the router: a cell's identity settings, the directory's
input checks, the route cache, what a forwarded request carries, and the router's caps."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from tenantry.api.runs import KEEPALIVE_SECONDS
from tenantry.cells.caps import InFlight, TooManyInFlight
from tenantry.cells.directory import Cell, TenantHome, check_api_url, check_name
from tenantry.cells.forward import request_headers, request_target, response_headers
from tenantry.cells.routes import RouteCache
from tenantry.client._transport import STREAM_READ_TIMEOUT
from tenantry.config import Settings
from tenantry.errors import ConfigurationError, ValidationFailed
from tenantry.ids import TenantId


def test_a_cell_is_local_in_the_default_region_unless_named() -> None:
    settings = Settings.from_env({})
    assert (settings.cell, settings.region) == ("local", "default")
    named = Settings.from_env({"TENANTRY_CELL": "eu-1", "TENANTRY_REGION": "eu"})
    assert (named.cell, named.region) == ("eu-1", "eu")
    router = Settings.from_env({"TENANTRY_DIRECTORY_URL": "postgresql://d/dir",
                                "TENANTRY_ROUTER_PORT": "9000"})
    assert router.directory_url == "postgresql://d/dir" and router.router_port == 9000


@pytest.mark.parametrize(("name", "value"), [
    ("TENANTRY_CELL", "EU-1"), ("TENANTRY_CELL", "-eu"), ("TENANTRY_CELL", "eu 1"),
    ("TENANTRY_CELL", "e" * 65), ("TENANTRY_REGION", "eu/west"), ("TENANTRY_REGION", "eu\x00"),
])
def test_bad_cell_names_and_regions_are_one_line_refusals(name: str, value: str) -> None:
    with pytest.raises(ConfigurationError) as refused:
        Settings.from_env({name: value})
    assert name in refused.value.detail and "\n" not in refused.value.detail


def test_router_port_range() -> None:
    with pytest.raises(ConfigurationError, match="TENANTRY_ROUTER_PORT"):
        Settings.from_env({"TENANTRY_ROUTER_PORT": "70000"})


@pytest.mark.parametrize("url", ["http://cell:8080", "https://eu-1.example.com",
                                 "http://[::1]:9000/"])
def test_cell_urls_that_route(url: str) -> None:
    assert check_api_url(url) == url.rstrip("/")


@pytest.mark.parametrize("url", ["ftp://cell", "http://", "http://cell:99999",
                                 "http://cell/api", "http://u:p@cell", "http://cell?x=1",
                                 "http://ce ll", "http://cell\x00", "cell:8080", "x" * 400])
def test_cell_urls_that_do_not(url: str) -> None:
    with pytest.raises(ValidationFailed):
        check_api_url(url)


def test_cell_names() -> None:
    assert check_name("eu-1") == "eu-1"
    for bad in ("", "Eu", "_eu", "eu.1", "e" * 65):
        with pytest.raises(ValidationFailed):
            check_name(bad)


def _home(cell: str = "eu-1") -> TenantHome:
    return TenantHome(TenantId("ten_a"), "eu", "active",
                      Cell(cell, "eu", "http://c", "t", False, datetime(2026, 1, 1, tzinfo=UTC)))


def test_a_cells_token_is_not_in_its_repr() -> None:
    assert "secret-token" not in repr(Cell("eu-1", "eu", "http://c", "secret-token", False,
                                           datetime(2026, 1, 1, tzinfo=UTC)))


def test_route_cache_expires_and_a_read_across_a_clear_is_not_kept() -> None:
    now = [0.0]
    cache = RouteCache(ttl_seconds=5, clock=lambda: now[0])
    cache.put(b"k", _home(), cache.generation)
    assert cache.get(b"k") == _home()
    now[0] = 5.0
    assert cache.get(b"k") is None
    generation = cache.generation
    cache.clear()  # a notification arrived while a read was in flight
    cache.put(b"k", _home("eu-2"), generation)
    assert cache.get(b"k") is None and len(cache) == 0


def test_forwarded_headers_drop_hop_by_hop_and_swap_the_operator_credential() -> None:
    raw = [("Host", "router"), ("Connection", "keep-alive, X-Private"), ("X-Private", "1"),
           ("Keep-Alive", "5"), ("Transfer-Encoding", "chunked"), ("Content-Length", "3"),
           ("Authorization", "Bearer router-token"), ("Last-Event-ID", "7"),
           ("Idempotency-Key", "abc"), ("X-Forwarded-For", "10.0.0.1")]
    out = dict(request_headers(raw, authorization="Bearer cell-token", client="10.0.0.2"))
    assert out == {"Authorization": "Bearer cell-token", "Last-Event-ID": "7",
                   "Idempotency-Key": "abc", "X-Forwarded-For": "10.0.0.1, 10.0.0.2"}
    kept = dict(request_headers([("Authorization", "Bearer tnt_x")]))
    assert kept == {"Authorization": "Bearer tnt_x"}
    with pytest.raises(ValidationFailed):
        request_headers([("X-Note", "a\x00b")])


def test_response_headers_lose_connection_fields_only() -> None:
    assert response_headers({"content-type": "text/event-stream", "connection": "close",
                             "transfer-encoding": "chunked", "retry-after": "5"}) == {
        "content-type": "text/event-stream", "retry-after": "5"}


def test_request_targets() -> None:
    assert request_target(b"/v1/runs/run_1/events", b"after=3") == "/v1/runs/run_1/events?after=3"
    assert request_target(b"/v1/agents", b"") == "/v1/agents"
    for path in (b"v1", b"/v1/a b", b"/v1/\x00", b"/v1/\xc3\xa9", b"/" + b"a" * 9000):
        with pytest.raises(ValidationFailed):
            request_target(path, b"")


def test_the_routers_caps_default_to_shares_of_its_connections_to_a_cell() -> None:
    assert Settings().router_caps == (100, 50, 50)  # of 1000 connections per cell
    assert Settings.from_env({"TENANTRY_ROUTER_CELL_CONNECTIONS": "200"}).router_caps == \
        (20, 10, 10)
    assert Settings.from_env({"TENANTRY_ROUTER_CELL_CONNECTIONS": "2"}).router_caps == \
        (2, 1, 1)
    set_ = Settings.from_env({"TENANTRY_ROUTER_MAX_REQUESTS_PER_TENANT": "8",
                              "TENANTRY_ROUTER_MAX_OPERATOR_REQUESTS": "3",
                              "TENANTRY_ROUTER_IDLE_SECONDS": "40"})
    assert set_.router_caps == (8, 4, 3) and set_.router_idle_seconds == 40


@pytest.mark.parametrize("env", [
    {"TENANTRY_ROUTER_MAX_STREAMS_PER_TENANT": "100"},  # not fewer than the requests
    {"TENANTRY_ROUTER_MAX_REQUESTS_PER_TENANT": "4", "TENANTRY_ROUTER_MAX_STREAMS_PER_TENANT":
     "4"},
    {"TENANTRY_ROUTER_CELL_CONNECTIONS": "10", "TENANTRY_ROUTER_MAX_REQUESTS_PER_TENANT": "11"},
    {"TENANTRY_ROUTER_CELL_CONNECTIONS": "10", "TENANTRY_ROUTER_MAX_OPERATOR_REQUESTS": "11"},
    {"TENANTRY_ROUTER_CELL_CONNECTIONS": "1"},
    {"TENANTRY_ROUTER_IDLE_SECONDS": "0"},
    {"TENANTRY_ROUTER_STREAM_LIFETIME_SECONDS": "soon"},
])
def test_router_caps_that_do_not_hold_are_refused_at_start(env: dict[str, str]) -> None:
    with pytest.raises(ConfigurationError) as refused:
        Settings.from_env(env)
    assert "TENANTRY_ROUTER_" in refused.value.detail


def test_a_tenant_past_its_caps_is_refused_and_its_places_come_back() -> None:
    caps = InFlight(per_tenant=3, streams_per_tenant=2, operator_per_cell=1)
    streams = [caps.tenant("a", stream=True) for _ in range(2)]
    with pytest.raises(TooManyInFlight) as refused:
        caps.tenant("a", stream=True)
    assert refused.value.status == 429 and refused.value.type == "overloaded"
    assert refused.value.extra == {"retry_after": 5}
    call = caps.tenant("a", stream=False)  # a stream counts as a request too: 3 of 3
    with pytest.raises(TooManyInFlight) as refused:
        caps.tenant("a", stream=False)
    assert refused.value.extra == {"retry_after": 1}
    other = caps.tenant("b", stream=True)  # another tenant's places are its own
    operator = caps.operator("eu-1")
    with pytest.raises(TooManyInFlight):
        caps.operator("eu-1")
    assert caps.operator("eu-2") is not None
    streams[0].release()
    streams[0].release()  # once only, however many ways out reach it
    assert caps.held("t:a") == 2 and caps.held("s:a") == 1
    caps.tenant("a", stream=True).release()
    for hold in (streams[1], call, other, operator):
        hold.release()
    assert caps.held("t:a") == caps.held("s:a") == caps.held("o:eu-1") == 0


def test_the_routers_idle_deadline_outlasts_the_cells_keepalive_and_not_the_sdks() -> None:
    """A live event stream is never idle that long (the cell sends a comment every 15 s:
    two may be missed); the router ends a silent one — cleanly, so the SDK reconnects at
    once — before the SDK's own read timeout gives up on it."""
    idle = Settings().router_idle_seconds
    assert 2 * KEEPALIVE_SECONDS < idle < STREAM_READ_TIMEOUT
