"""Fetch a provider's own usage (and cost) report for a window of UTC days from its admin
endpoint, following ``has_more``/``next_page`` to the last page.

The admin key is a separate credential (OpenAI's and Anthropic's admin keys cannot send
model requests and ordinary keys cannot read reports). It is used for these requests only:
never stored, never logged, never part of an error message."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from typing import Any

import httpx2
import pydantic

from tenantry.errors import TenantryError, ValidationFailed
from tenantry.ledger.provider_reports import MAX_PAGES, AnthropicExport, OpenAIExport

ANTHROPIC_VERSION = "2023-06-01"
TIMEOUT_SECONDS = 30.0


class ProviderReportUnavailable(TenantryError):
    """The provider's report endpoint did not answer, failed, or answered something that is
    not its report format."""

    type = "provider_report_unavailable"
    status = 502
    title = "Provider report unavailable"
    retryable = True


def _endpoints(provider: str, base_url: str) -> tuple[str, str]:
    base = base_url.rstrip("/")
    if provider == "openai":  # an OpenAI-style base URL ends in /v1
        return f"{base}/organization/usage/completions", f"{base}/organization/costs"
    if provider == "anthropic":  # the origin
        return (f"{base}/v1/organizations/usage_report/messages",
                f"{base}/v1/organizations/cost_report")
    raise ValidationFailed(f"fetch: a {provider} account has no provider usage report; "
                           "reconcile it with an export instead")


def _window(provider: str, first: date, last: date) -> dict[str, Any]:
    start = datetime(first.year, first.month, first.day, tzinfo=UTC)
    end = datetime(last.year, last.month, last.day, tzinfo=UTC) + timedelta(days=1)
    if provider == "openai":
        return {"start_time": int(start.timestamp()), "end_time": int(end.timestamp()),
                "bucket_width": "1d"}
    return {"starting_at": start.strftime("%Y-%m-%dT%H:%M:%SZ"),
            "ending_at": end.strftime("%Y-%m-%dT%H:%M:%SZ"), "bucket_width": "1d"}


async def _pages(client: httpx2.AsyncClient, url: str, params: dict[str, Any],
                 headers: dict[str, str], what: str) -> list[Any]:
    pages: list[Any] = []
    page: str | None = None
    while True:
        query = {**params, **({"page": page} if page else {})}
        try:
            response = await client.get(url, params=query, headers=headers)
        except httpx2.HTTPError as exc:
            raise ProviderReportUnavailable(
                f"{what}: cannot reach {url}: {type(exc).__name__}") from None
        if response.status_code in (401, 403):
            raise ValidationFailed(f"fetch.admin_key: the provider refused it for the {what} "
                                   f"({response.status_code}); an admin key is needed")
        if response.status_code != 200:
            raise ProviderReportUnavailable(
                f"{what}: {url} answered {response.status_code}")
        try:
            body = response.json()
        except ValueError:
            raise ProviderReportUnavailable(f"{what}: {url} did not answer JSON") from None
        pages.append(body)
        more = isinstance(body, dict) and body.get("has_more") is True
        page = body.get("next_page") if more else None
        if not more or not isinstance(page, str) or not page:
            return pages
        if len(pages) >= MAX_PAGES:
            raise ProviderReportUnavailable(f"{what}: more than {MAX_PAGES} pages")


async def fetch_export(
    provider: str, base_url: str, admin_key: str, first: date, last: date, *,
    costs: bool, client: httpx2.AsyncClient | None = None,
) -> OpenAIExport | AnthropicExport:
    """The provider's report over ``[first, last]`` (UTC days), grouped by model, as an
    export; with ``costs``, its cost report too."""
    usage_url, cost_url = _endpoints(provider, base_url)
    params = _window(provider, first, last)
    if provider == "openai":
        headers = {"Authorization": f"Bearer {admin_key}"}
        usage_params = {**params, "group_by": "model"}
    else:
        headers = {"x-api-key": admin_key, "anthropic-version": ANTHROPIC_VERSION}
        usage_params = {**params, "group_by[]": "model"}
    owned = client is None
    http = client or httpx2.AsyncClient(timeout=TIMEOUT_SECONDS)
    try:
        raw: dict[str, Any] = {"format": provider, "usage": await _pages(
            http, usage_url, usage_params, headers, "usage report")}
        if costs:
            raw["costs"] = await _pages(http, cost_url, params, headers, "cost report")
    finally:
        if owned:
            await http.aclose()
    model = OpenAIExport if provider == "openai" else AnthropicExport
    try:
        return model.model_validate(raw)
    except pydantic.ValidationError as exc:
        first_error = exc.errors()[0]
        where = ".".join(str(p) for p in first_error["loc"])
        raise ProviderReportUnavailable(
            f"the provider's report is not in its documented format: {where}: "
            f"{first_error['msg']}") from None
