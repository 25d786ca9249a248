"""Operator API for billing checks: reconcile a model account's recorded usage with the
provider's own usage report (docs/decisions/0007-billing-reconcile.md)."""

from __future__ import annotations

from datetime import date, datetime
from typing import Annotated, Literal, Self

from fastapi import APIRouter, Depends, Query
from pydantic import BaseModel, ConfigDict, Field, model_validator

from tenantry.api.admin import Label
from tenantry.api.auth import PlatformDep, operator
from tenantry.api.fields import HttpUrl, exactly_one_given
from tenantry.api.params import PageLimit
from tenantry.api.problems import MEDIA_TYPE
from tenantry.errors import ValidationFailed
from tenantry.ledger import provider_fetch, provider_reports, reconcile
from tenantry.ledger.provider_reports import ProviderExport
from tenantry.models import accounts

router = APIRouter(prefix="/admin/v1/billing", tags=["operator"],
                   dependencies=[Depends(operator)])

MAX_DAYS = 366
EARLIEST, LATEST = date(2000, 1, 1), date(2099, 12, 31)
_YEARS = "^20[0-9]{2}-"  # EARLIEST to LATEST, as the document can say it


class FetchReport(BaseModel):
    model_config = ConfigDict(extra="forbid")
    admin_key: str = Field(
        min_length=1, max_length=4096,
        description="The provider's admin key (OpenAI `sk-admin-…`, Anthropic "
                    "`sk-ant-admin…`): used for these report requests only, never stored "
                    "or logged.")
    costs: bool = Field(default=True, description="Fetch the cost report too and compare "
                                                  "cost.")
    base_url: HttpUrl | None = Field(
        default=None, description="Where the report API is; default: the account's base URL.")


class ReconcileIn(BaseModel):
    """Exactly one of `export` (the report the operator downloaded) and `fetch` (fetch it
    from the provider's admin endpoint now)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True,
                              json_schema_extra=exactly_one_given("export", "fetch"))
    account: Label = Field(description="The model account (`account_id`).")
    from_: date = Field(alias="from", json_schema_extra={"pattern": _YEARS},
                        description="First UTC day, inclusive.")
    to: date = Field(json_schema_extra={"pattern": _YEARS},
                     description=f"Last UTC day, inclusive; not before `from`, at most "
                                 f"{MAX_DAYS} days in all.")
    export: ProviderExport | None = Field(
        default=None, description="The provider's usage report pages (and cost report "
                                  "pages), in the provider's own format; `format` names it "
                                  "and must be the account's provider.")
    fetch: FetchReport | None = None

    @model_validator(mode="after")
    def _one_source(self) -> Self:
        if (self.export is None) == (self.fetch is None):
            raise ValueError("give exactly one of export and fetch")
        if self.to < self.from_:
            raise ValueError("to must not be before from")
        if self.from_ < EARLIEST or self.to > LATEST:
            raise ValueError(f"days from {EARLIEST} to {LATEST} only")
        if (self.to - self.from_).days >= MAX_DAYS:
            raise ValueError(f"at most {MAX_DAYS} days at a time")
        return self


FigureName = Literal["requests", "input_tokens", "cached_input_tokens",
                     "cache_write_input_tokens", "output_tokens", "cost_micros"]


class FigureOut(BaseModel):
    name: FigureName
    ours: int = Field(description="From the usage facts (the billing record).")
    theirs: int = Field(description="From the provider's report.")
    relative_diff: float | None = Field(
        description="(ours - theirs) / theirs; null when theirs is 0 and ours is not.")
    flagged: bool = Field(description="Differs by more than 1% of theirs (or theirs is 0 "
                                      "and ours is not).")


class DayOut(BaseModel):
    day: date
    status: Literal["match", "differs", "only_ours", "only_provider"]
    flagged: bool
    figures: list[FigureOut]


class ReconciliationOut(BaseModel):
    model_config = ConfigDict(populate_by_name=True)
    reconciliation_id: str
    account: str
    provider: str
    from_: date = Field(alias="from")
    to: date
    source: Literal["export", "fetch"]
    cost_compared: bool = Field(description="Whether the provider's report had costs.")
    tolerance_percent: int = reconcile.TOLERANCE_PERCENT
    flagged_days: int = Field(ge=0)
    days: list[DayOut] = Field(description="Every day either side used, oldest first.")
    created_at: datetime


def _out(r: reconcile.Reconciliation) -> ReconciliationOut:
    return ReconciliationOut.model_validate({
        "reconciliation_id": str(r.reconciliation_id), "account": r.account,
        "provider": r.provider, "from": r.from_day, "to": r.to_day, "source": r.source,
        "cost_compared": r.cost_compared, "flagged_days": len(r.flagged),
        "days": [d.to_json() for d in r.days], "created_at": r.created_at})


@router.post("/reconcile", status_code=201, response_model=ReconciliationOut,
             response_model_by_alias=True,
             responses={502: {"description": "The provider's report endpoint failed "
                                             "(`provider_report_unavailable`)",
                              "content": {MEDIA_TYPE: {"schema": {
                                  "$ref": "#/components/schemas/Problem"}}}}})
async def reconcile_account(body: ReconcileIn, p: PlatformDep) -> ReconciliationOut:
    """Compare the account's usage facts per UTC day with the provider's own report and
    store the result. A day is flagged when a figure differs by more than 1% or the day
    appears on one side only; `flagged_days` counts them."""
    account = await accounts.get_account(p.db, body.account)  # 404 when there is none
    if body.export is not None:
        if body.export.format != account.provider:
            raise ValidationFailed(f"export.format: the report is {body.export.format}'s but "
                                   f"account {account.account_id} is {account.provider}")
        export = body.export
        source: Literal["export", "fetch"] = "export"
    else:
        assert body.fetch is not None
        export = await provider_fetch.fetch_export(
            account.provider, body.fetch.base_url or account.base_url, body.fetch.admin_key,
            body.from_, body.to, costs=body.fetch.costs)
        source = "fetch"
    theirs = provider_reports.provider_usage(export)
    result = await reconcile.reconcile(p.db, account=account.account_id,
                                       provider=account.provider, first=body.from_,
                                       last=body.to, theirs=theirs, source=source)
    return _out(result)


@router.get("/reconciliations", response_model=list[ReconciliationOut],
            response_model_by_alias=True)
async def list_reconciliations(
    p: PlatformDep,
    account: str | None = Query(None, max_length=64, description="Only this account's."),
    limit: Annotated[PageLimit, Query()] = 20,
) -> list[ReconciliationOut]:
    """Past reconciliations, newest first."""
    return [_out(r) for r in await reconcile.recent(p.db, account, limit)]
