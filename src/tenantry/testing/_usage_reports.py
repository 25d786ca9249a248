"""The fake model server's admin endpoints: the provider's own usage and cost reports,
computed from its usage log, in OpenAI's and Anthropic's report formats.

OpenAI: ``GET /v1/organization/usage/completions`` and ``GET /v1/organization/costs``
(``start_time``/``end_time`` in Unix seconds, ``Authorization: Bearer <admin key>``).
Anthropic: ``GET /v1/organizations/usage_report/messages`` and
``GET /v1/organizations/cost_report`` (``starting_at``/``ending_at`` RFC 3339,
``x-api-key: <admin key>``). Both: ``bucket_width=1d`` only (the real APIs also have 1h/1m),
``limit`` buckets per page (default 7, at most 31) and the ``has_more``/``next_page``
cursor, ``group_by=model`` (``group_by[]=model`` for Anthropic). Every UTC day of the window
is a bucket, an empty one when nothing was used.

Costs come from the server's ``prices`` (micro-dollars per million tokens: input, cached
input, output), each call rounded up to a whole micro-dollar as Tenantry's ledger does, so an
agreeing platform agrees exactly. Without prices the cost endpoints answer 404."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any, Protocol

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from tenantry.models.wire import Wire, json_response

DAY = timedelta(days=1)
DEFAULT_BUCKETS = 7
MAX_BUCKETS = 31
ANTHROPIC_VERSION = "2023-06-01"
# (input, cached input, output) micro-dollars per million tokens, per model.
Prices = Mapping[str, tuple[int, int, int]]


class ReportedUsage(Protocol):
    """What a report reads of one completion's usage (the fake server's ``UsageRecord``):
    a protocol, so that the server imports its reports and not the other way round."""

    @property
    def model(self) -> str: ...
    @property
    def prompt_tokens(self) -> int: ...
    @property
    def completion_tokens(self) -> int: ...
    @property
    def cached_tokens(self) -> int: ...
    @property
    def created_at(self) -> float: ...


class UsageReports:
    def __init__(self, *, provider: str, wire: Wire,
                 log: Callable[[], Sequence[ReportedUsage]],
                 record: Callable[[Request], Awaitable[bytes]], admin_key: str,
                 prices: Prices | None) -> None:
        self.provider = provider
        self._record = record  # report requests land in the server's request log too
        self._wire = wire
        self._log = log
        self.admin_key = admin_key
        self.prices = dict(prices) if prices is not None else None

    def routes(self) -> list[Route]:
        if self.provider == "openai":
            return [Route("/v1/organization/usage/completions", self._usage, methods=["GET"]),
                    Route("/v1/organization/costs", self._costs, methods=["GET"])]
        return [Route("/v1/organizations/usage_report/messages", self._usage, methods=["GET"]),
                Route("/v1/organizations/cost_report", self._costs, methods=["GET"])]

    # ------------------------------------------------------------------ handlers

    async def _usage(self, request: Request) -> Response:
        await self._record(request)
        window = self._window(request)
        if isinstance(window, Response):
            return window
        starts, has_more, next_page = window
        by_model = "model" in (request.query_params.getlist("group_by")
                               + request.query_params.getlist("group_by[]"))
        buckets = [self._usage_bucket(start, by_model) for start in starts]
        return self._page(buckets, has_more, next_page)

    async def _costs(self, request: Request) -> Response:
        await self._record(request)
        if self.prices is None:
            return self._wire.error(404, "This organization has no cost report.")
        window = self._window(request)
        if isinstance(window, Response):
            return window
        starts, has_more, next_page = window
        return self._page([self._cost_bucket(start) for start in starts], has_more, next_page)

    # ------------------------------------------------------------------ the window

    def _window(self, request: Request) -> tuple[list[datetime], bool, str | None] | Response:
        params = request.query_params
        if not self._authorized(request):
            return self._wire.error(401, "Invalid admin key.")
        if params.get("bucket_width", "1d") != "1d":
            return self._wire.error(400, "This fake serves bucket_width=1d only.",
                                    param="bucket_width")
        try:
            if self.provider == "openai":
                start = _from_unix(params["start_time"])
                end = _from_unix(params["end_time"]) if "end_time" in params else _now()
            else:
                start = _from_rfc3339(params["starting_at"])
                end = _from_rfc3339(params["ending_at"]) if "ending_at" in params else _now()
            limit = int(params.get("limit", DEFAULT_BUCKETS))
            if "page" in params:
                start = _from_unix(params["page"])
        except (KeyError, ValueError) as exc:
            return self._wire.error(400, f"Invalid query parameters: {exc}")
        if not 1 <= limit <= MAX_BUCKETS:
            return self._wire.error(400, f"limit must be 1 to {MAX_BUCKETS}.", param="limit")
        day = datetime(start.year, start.month, start.day, tzinfo=UTC)
        starts: list[datetime] = []
        while day < end and len(starts) < limit:
            starts.append(day)
            day += DAY
        has_more = day < end
        return starts, has_more, str(int(day.timestamp())) if has_more else None

    def _authorized(self, request: Request) -> bool:
        if self.provider == "anthropic":
            return (request.headers.get("x-api-key") == self.admin_key
                    and request.headers.get("anthropic-version") == ANTHROPIC_VERSION)
        scheme, _, token = request.headers.get("authorization", "").partition(" ")
        return scheme.lower() == "bearer" and token.strip() == self.admin_key

    def _records(self, start: datetime) -> list[ReportedUsage]:
        lo, hi = start.timestamp(), (start + DAY).timestamp()
        return [r for r in self._log() if lo <= r.created_at < hi]

    # ------------------------------------------------------------------ report shapes

    def _page(self, buckets: list[dict[str, Any]], has_more: bool,
              next_page: str | None) -> Response:
        body: dict[str, Any] = {"data": buckets, "has_more": has_more, "next_page": next_page}
        if self.provider == "openai":
            body = {"object": "page", **body}
        return json_response(200, body)

    def _usage_bucket(self, start: datetime, by_model: bool) -> dict[str, Any]:
        groups: dict[str | None, list[ReportedUsage]] = {}
        for record in self._records(start):
            groups.setdefault(record.model if by_model else None, []).append(record)
        results = [self._usage_result(model, records) for model, records in groups.items()]
        return self._bucket(start, results)

    def _usage_result(self, model: str | None, records: list[ReportedUsage]) -> dict[str, Any]:
        prompt = sum(r.prompt_tokens for r in records)
        cached = sum(r.cached_tokens for r in records)
        output = sum(r.completion_tokens for r in records)
        if self.provider == "openai":
            return {"object": "organization.usage.completions.result", "input_tokens": prompt,
                    "input_cached_tokens": cached, "output_tokens": output,
                    "input_audio_tokens": 0, "output_audio_tokens": 0,
                    "num_model_requests": len(records), "project_id": None, "user_id": None,
                    "api_key_id": None, "model": model, "batch": None}
        return {"uncached_input_tokens": prompt - cached, "cache_read_input_tokens": cached,
                "cache_creation": {"ephemeral_1h_input_tokens": 0,
                                   "ephemeral_5m_input_tokens": 0},
                "output_tokens": output, "server_tool_use": {"web_search_requests": 0},
                "api_key_id": None, "workspace_id": None, "model": model,
                "service_tier": "standard", "context_window": "0-200k"}

    def _cost_bucket(self, start: datetime) -> dict[str, Any]:
        records = self._records(start)
        if not records:
            return self._bucket(start, [])
        micros = sum(self._cost_micros(r) for r in records)
        if self.provider == "openai":
            result: dict[str, Any] = {
                "object": "organization.costs.result",
                "amount": {"value": float(Decimal(micros) / 1_000_000), "currency": "usd"},
                "line_item": None, "project_id": None}
        else:  # a decimal string in cents
            result = {"amount": str(Decimal(micros) / 10_000), "currency": "USD",
                      "cost_type": None, "description": None, "model": None,
                      "service_tier": None, "token_type": None, "context_window": None,
                      "workspace_id": None}
        return self._bucket(start, [result])

    def _cost_micros(self, record: ReportedUsage) -> int:
        assert self.prices is not None
        price = self.prices.get(record.model) or self.prices.get(record.model.split("/")[0])
        if price is None:
            return 0
        total = ((record.prompt_tokens - record.cached_tokens) * price[0]
                 + record.cached_tokens * price[1] + record.completion_tokens * price[2])
        return -(-total // 1_000_000)

    def _bucket(self, start: datetime, results: list[dict[str, Any]]) -> dict[str, Any]:
        end = start + DAY
        if self.provider == "openai":
            return {"object": "bucket", "start_time": int(start.timestamp()),
                    "end_time": int(end.timestamp()), "results": results}
        return {"starting_at": _rfc3339(start), "ending_at": _rfc3339(end), "results": results}


def _now() -> datetime:
    return datetime.now(UTC)


def _from_unix(text: str) -> datetime:
    return datetime.fromtimestamp(int(text), UTC)


def _from_rfc3339(text: str) -> datetime:
    value = datetime.fromisoformat(text.replace("Z", "+00:00"))
    if value.tzinfo is None:
        raise ValueError(f"{text!r} has no time zone")
    return value.astimezone(UTC)


def _rfc3339(value: datetime) -> str:
    return value.strftime("%Y-%m-%dT%H:%M:%SZ")
