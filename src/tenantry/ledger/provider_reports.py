"""The providers' own usage and cost reports, parsed at the edge into per-day figures.

Formats, as the providers serve them (and as an operator downloads them):

- OpenAI: the organization Usage API (``GET /v1/organization/usage/completions``: pages of
  ``bucket`` objects with ``results[]`` of ``input_tokens`` (cached included),
  ``input_cached_tokens``, ``output_tokens``, ``num_model_requests``) and Costs API
  (``GET /v1/organization/costs``: ``amount.value`` in dollars).
- Anthropic: the Admin API usage report (``GET /v1/organizations/usage_report/messages``:
  ``uncached_input_tokens``, ``cache_read_input_tokens``,
  ``cache_creation.{ephemeral_5m_input_tokens,ephemeral_1h_input_tokens}``,
  ``output_tokens``; no request count) and cost report
  (``GET /v1/organizations/cost_report``: ``amount`` a decimal string in cents).

Both paginate with ``has_more``/``next_page``; an export is the list of pages. Buckets must
be whole UTC days (``bucket_width=1d``). Fields a provider adds later are ignored; the ones
compared are required and must be non-negative integers."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal, InvalidOperation
from typing import Annotated, Any, Generic, Literal, TypeVar

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field

from tenantry.errors import ValidationFailed

MAX_PAGES = 100
DAY = timedelta(days=1)
# Bounds far above any real account's day that keep every sum inside a 64-bit integer
# (a day is one bucket of at most 10,000 results) and every time inside datetime's range.
Tokens = Annotated[int, Field(ge=0, le=10**12)]
UnixSeconds = Annotated[int, Field(ge=0, le=4_102_444_800, description="Unix seconds.")]


class _Report(BaseModel):
    # A provider adds fields over time: ignore them; the ones read are typed and required.
    model_config = ConfigDict(extra="ignore", frozen=True)


# -- OpenAI --------------------------------------------------------------------------------

_Result = TypeVar("_Result", bound=_Report)
_Bucket = TypeVar("_Bucket", bound=_Report)


class _OpenAIBucket(_Report, Generic[_Result]):
    """One day of the Usage API or of the Costs API: the two differ only in their results."""

    object: Literal["bucket"]
    start_time: UnixSeconds
    end_time: UnixSeconds
    results: list[_Result] = Field(max_length=10_000)


class _OpenAIPage(_Report, Generic[_Bucket]):
    object: Literal["page"]
    data: list[_Bucket] = Field(max_length=1000)
    has_more: bool
    next_page: str | None = None


class OpenAIUsageResult(_Report):
    object: Literal["organization.usage.completions.result"]
    input_tokens: Tokens = Field(description="All input tokens, cached included.")
    input_cached_tokens: Tokens = 0
    output_tokens: Tokens
    num_model_requests: Tokens
    model: str | None = None


class OpenAIUsageBucket(_OpenAIBucket[OpenAIUsageResult]):
    pass


class OpenAIUsagePage(_OpenAIPage[OpenAIUsageBucket]):
    pass


class OpenAICostAmount(_Report):
    value: float = Field(ge=0, le=10**8, allow_inf_nan=False, description="Dollars.")
    currency: str = Field(min_length=1, max_length=8)


class OpenAICostResult(_Report):
    object: Literal["organization.costs.result"]
    amount: OpenAICostAmount | None = None
    line_item: str | None = None


class OpenAICostBucket(_OpenAIBucket[OpenAICostResult]):
    pass


class OpenAICostPage(_OpenAIPage[OpenAICostBucket]):
    pass


class OpenAIExport(BaseModel):
    """OpenAI's reports as downloaded: the Usage API's pages and, optionally, the Costs
    API's."""

    model_config = ConfigDict(extra="forbid")
    format: Literal["openai"]
    usage: list[OpenAIUsagePage] = Field(min_length=1, max_length=MAX_PAGES)
    costs: list[OpenAICostPage] | None = Field(default=None, max_length=MAX_PAGES)


# -- Anthropic -----------------------------------------------------------------------------


class AnthropicCacheCreation(_Report):
    ephemeral_1h_input_tokens: Tokens = 0
    ephemeral_5m_input_tokens: Tokens = 0


class AnthropicUsageResult(_Report):
    uncached_input_tokens: Tokens
    cache_read_input_tokens: Tokens
    cache_creation: AnthropicCacheCreation = AnthropicCacheCreation()
    output_tokens: Tokens
    model: str | None = None


class AnthropicUsageBucket(_Report):
    starting_at: AwareDatetime
    ending_at: AwareDatetime
    results: list[AnthropicUsageResult] = Field(max_length=10_000)


class AnthropicUsagePage(_Report):
    data: list[AnthropicUsageBucket] = Field(max_length=1000)
    has_more: bool
    next_page: str | None = None


class AnthropicCostResult(_Report):
    amount: str = Field(pattern=r"^\d{1,10}(\.\d{1,12})?$",
                        description="Cents, as a decimal string.")
    currency: str = Field(min_length=1, max_length=8)


class AnthropicCostBucket(_Report):
    starting_at: AwareDatetime
    ending_at: AwareDatetime
    results: list[AnthropicCostResult] = Field(max_length=10_000)


class AnthropicCostPage(_Report):
    data: list[AnthropicCostBucket] = Field(max_length=1000)
    has_more: bool
    next_page: str | None = None


class AnthropicExport(BaseModel):
    """Anthropic's reports as downloaded: the usage report's pages and, optionally, the
    cost report's."""

    model_config = ConfigDict(extra="forbid")
    format: Literal["anthropic"]
    usage: list[AnthropicUsagePage] = Field(min_length=1, max_length=MAX_PAGES)
    costs: list[AnthropicCostPage] | None = Field(default=None, max_length=MAX_PAGES)


ProviderExport = Annotated[OpenAIExport | AnthropicExport, Field(discriminator="format")]


# -- what is compared ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class DayUsage:
    """One account's usage on one UTC day. ``None``: this side does not report the
    figure (Anthropic has no request count, OpenAI no cache writes, a report without
    costs no cost)."""

    day: date
    requests: int | None
    input_tokens: int  # every input token: uncached, cache reads and cache writes
    cached_input_tokens: int
    cache_write_input_tokens: int | None
    output_tokens: int
    cost_micros: int | None


@dataclass(frozen=True, slots=True)
class ProviderUsage:
    """A provider's report as figures per UTC day (a day is present when its bucket had
    results), and which figures its format reports."""

    days: dict[date, DayUsage]
    figures: frozenset[str]


_OPENAI_FIGURES = frozenset({"requests", "input_tokens", "cached_input_tokens",
                             "output_tokens"})
_ANTHROPIC_FIGURES = frozenset({"input_tokens", "cached_input_tokens",
                                "cache_write_input_tokens", "output_tokens"})


def provider_usage(export: OpenAIExport | AnthropicExport) -> ProviderUsage:
    """Raises :class:`ValidationFailed` for a bucket that is not one UTC day, a day
    reported twice, or a cost not in US dollars."""
    usage: dict[date, DayUsage] = {}
    costs: dict[date, int] = {}
    if isinstance(export, OpenAIExport):
        figures = _OPENAI_FIGURES
        for _, day, o in _buckets(export.usage, "usage", _openai_span):
            if o.results:
                usage[day] = DayUsage(
                    day, sum(r.num_model_requests for r in o.results),
                    sum(r.input_tokens for r in o.results),
                    sum(r.input_cached_tokens for r in o.results), None,
                    sum(r.output_tokens for r in o.results), None)
        for where, day, c in _buckets(export.costs or [], "costs", _openai_span):
            amounts = [r.amount for r in c.results if r.amount is not None]
            if amounts:
                costs[day] = sum(_micros(Decimal(str(a.value)), a.currency, where)
                                 for a in amounts)
    else:
        figures = _ANTHROPIC_FIGURES
        for _, day, a in _buckets(export.usage, "usage", _anthropic_span):
            if a.results:
                writes = sum(r.cache_creation.ephemeral_5m_input_tokens
                             + r.cache_creation.ephemeral_1h_input_tokens for r in a.results)
                reads = sum(r.cache_read_input_tokens for r in a.results)
                usage[day] = DayUsage(
                    day, None, sum(r.uncached_input_tokens for r in a.results) + reads + writes,
                    reads, writes, sum(r.output_tokens for r in a.results), None)
        for where, day, ac in _buckets(export.costs or [], "costs", _anthropic_span):
            if ac.results:
                costs[day] = sum(_micros(_cents(r.amount, where) / 100, r.currency, where)
                                 for r in ac.results)
    if export.costs is not None:
        figures = figures | {"cost_micros"}
    days: dict[date, DayUsage] = {}
    for day in sorted(set(usage) | set(costs)):  # a day billed with no usage shows too
        u = usage.get(day) or DayUsage(day, 0, 0, 0, 0, 0, None)
        days[day] = DayUsage(u.day, u.requests, u.input_tokens, u.cached_input_tokens,
                             u.cache_write_input_tokens, u.output_tokens, costs.get(day, 0))
    return ProviderUsage(days, figures)


def covered_days(export: OpenAIExport | AnthropicExport) -> frozenset[date]:
    """The UTC days the export has a bucket for (in its cost report too, when it has one),
    used or not: a provider whose report does not yet reach a day leaves its bucket out."""
    span = _openai_span if isinstance(export, OpenAIExport) else _anthropic_span
    days = frozenset(day for _, day, _ in _buckets(export.usage, "usage", span))
    if export.costs is not None:
        days &= frozenset(day for _, day, _ in _buckets(export.costs, "costs", span))
    return days


def _openai_span(bucket: OpenAIUsageBucket | OpenAICostBucket) -> tuple[datetime, datetime]:
    return (datetime.fromtimestamp(bucket.start_time, UTC),
            datetime.fromtimestamp(bucket.end_time, UTC))


def _anthropic_span(bucket: AnthropicUsageBucket | AnthropicCostBucket
                    ) -> tuple[datetime, datetime]:
    return bucket.starting_at.astimezone(UTC), bucket.ending_at.astimezone(UTC)


def _buckets(pages: Sequence[Any], part: str, span: Callable[[Any], tuple[datetime, datetime]],
             ) -> list[tuple[str, date, Any]]:
    """``(where, day, bucket)`` for every bucket of every page, each a distinct UTC day."""
    seen: set[date] = set()
    found: list[tuple[str, date, Any]] = []
    for p, page in enumerate(pages):
        for b, bucket in enumerate(page.data):
            where = f"{part}[{p}].data[{b}]"
            start, end = span(bucket)
            if (start.hour, start.minute, start.second, start.microsecond) != (0, 0, 0, 0) \
                    or end - start != DAY:
                raise ValidationFailed(f"{where}: buckets must be whole UTC days "
                                       "(bucket_width=1d)")
            if start.date() in seen:
                raise ValidationFailed(f"{where}: {start.date()} appears twice in the report")
            seen.add(start.date())
            found.append((where, start.date(), bucket))
    return found


def _cents(text: str, where: str) -> Decimal:
    try:
        return Decimal(text)
    except InvalidOperation:  # the pattern lets only decimals through; belt and braces
        raise ValidationFailed(f"{where}: amount {text!r} is not a decimal") from None


def _micros(dollars: Decimal, currency: str, where: str) -> int:
    if currency.lower() != "usd":
        raise ValidationFailed(f"{where}: costs in {currency!r}; only US dollars are compared")
    return int((dollars * 1_000_000).to_integral_value())

