"""Operator API for prices: any model the operator prices can be served (ADR 0003).

Model names contain ``/``, ``:`` and ``.`` (``meta-llama/Llama-3.1-8B-Instruct``,
``qwen2.5:7b``), so the routes take the rest of the path as the name (``{model:path}``)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, Query, Response
from pydantic import AwareDatetime, BaseModel, ConfigDict, Field

from tenantry.api.auth import PlatformDep, operator
from tenantry.api.fields import MODEL_NAME_PATTERN, WholeNumber
from tenantry.api.links import links, to
from tenantry.api.pagination import PageRequest, keyed_by, matching
from tenantry.api.params import LongPageLimit
from tenantry.api.platform import Platform
from tenantry.errors import NotFound
from tenantry.ledger import prices
from tenantry.ledger.prices import PriceVersion
from tenantry.ledger.pricing import MAX_MICROS, SANDBOX, Price, SandboxPrice

router = APIRouter(prefix="/admin/v1", tags=["operator"], dependencies=[Depends(operator)])

#: A model name as accounts and prices take it: no whitespace, control characters or `*`.
MODEL_PATTERN = MODEL_NAME_PATTERN
_MODEL_CURSOR = matching(MODEL_PATTERN)
Micros = Annotated[int, Field(ge=0, le=MAX_MICROS, strict=True), WholeNumber]
_MODEL_DESCRIPTION = ("The model's name as agents and accounts use it (may contain `/`, `:`, "
                      "`.`); `sandbox` is the price of a second of sandbox time (its own "
                      "routes).")
ModelPath = Annotated[str, Path(min_length=1, max_length=200, pattern=MODEL_PATTERN,
                                description=_MODEL_DESCRIPTION)]
# A new price of a model: not `sandbox`, whose path is its own operation's, with its own
# body (a path without a template is matched first; said here for tools that do not apply
# that rule). Reading either answers the same.
ModelToPrice = Annotated[str, Path(min_length=1, max_length=200, pattern=MODEL_PATTERN,
                                   json_schema_extra={"not": {"const": SANDBOX}},
                                   description=_MODEL_DESCRIPTION)]


def _effective_from() -> Any:
    return Field(default=None, description="When this version takes effect, with a "
                                           "timezone; not in the past (a call already "
                                           "billed keeps its price: 409). Omitted: now. "
                                           "Workers apply it within 5 s of this time.")


class PutPrice(BaseModel):
    """A new version of a model's price, in micro-dollars per million tokens."""

    model_config = ConfigDict(extra="forbid")
    input_per_m: Micros = Field(description="Plain input tokens.")
    cached_input_per_m: Micros = Field(description="Input read from the provider's prompt "
                                                   "cache.")
    cache_write_per_m: Micros | None = Field(default=None, description="Input written to "
                                             "the prompt cache; null: the input price.")
    output_per_m: Micros = Field(description="Output tokens.")
    effective_from: AwareDatetime | None = _effective_from()


class PutSandboxPrice(BaseModel):
    """A new version of the sandbox's price: micro-dollars per second of sandbox time."""

    model_config = ConfigDict(extra="forbid")
    per_second_micros: Micros = Field(description="A second of sandbox execution time.")
    effective_from: AwareDatetime | None = _effective_from()


class PriceOut(BaseModel):
    model: str
    source: str = Field(description="`operator` (set with PUT) or `default` (built in).")
    version: str = Field(description="The identity recorded with every call it billed "
                                     "(`price_version` on ModelReplied and usage facts).")
    effective_from: datetime | None = Field(description="None: the built-in default, in "
                                                        "force while no operator version is.")
    created_at: datetime | None
    input_per_m: int | None
    cached_input_per_m: int | None
    cache_write_per_m: int | None
    output_per_m: int | None
    per_second_micros: int | None
    in_force: bool = Field(description="Whether this version prices calls made now.")


class PricePage(BaseModel):
    data: list[PriceOut]
    next_cursor: str | None


class PriceHistory(BaseModel):
    model: str
    data: list[PriceOut] = Field(description="The operator's versions, newest first, then "
                                             "the built-in default if there is one.")


def _out(version: PriceVersion, in_force: bool) -> PriceOut:
    return PriceOut.model_validate({**version.to_json(), "in_force": in_force})


def _put_responses(**named: dict[str, Any]) -> dict[int | str, dict[str, Any]]:
    found = links(**named)
    return {
        200: found,
        201: {"description": "A new version", "model": PriceOut, **found},
        409: {"description": "`conflict`: a version from that `effective_from` exists with "
                             "other prices (versions never change), or `effective_from` is "
                             "in the past (`field`: effective_from)"}}


_HISTORY = to("GET", "/admin/v1/prices/{model}", "Every version of this price.",
              parameters={"model": "$response.body#/model"})
_SERVE_IT = to("POST", "/admin/v1/model-accounts", "An account that serves the model (once "
               "priced, it can be).", body={"models": ["$response.body#/model"]})


async def _put(p: Platform, new: PriceVersion, response: Response) -> PriceOut:
    version, created = await prices.put(p.db, new, at_now=new.effective_from is None)
    response.status_code = 201 if created else 200
    assert version.effective_from is not None
    return _out(version, version.effective_from <= datetime.now(UTC))


# Before `{model:path}`: a path without a template is matched first (as OpenAPI has it).
@router.put(f"/prices/{SANDBOX}", response_model=PriceOut, status_code=200,
            responses=_put_responses(PriceHistory=_HISTORY))
async def put_sandbox_price(body: PutSandboxPrice, response: Response, p: PlatformDep) -> PriceOut:
    """Add a version of the price of a second of sandbox time. 201: created; 200: this
    exact version existed already."""
    return await _put(p, PriceVersion(SANDBOX, body.effective_from,
                                      sandbox=SandboxPrice(body.per_second_micros)), response)


@router.get(f"/prices/{SANDBOX}", response_model=PriceHistory)
async def sandbox_price_history(
    p: PlatformDep, limit: Annotated[LongPageLimit, Query()] = 100,
) -> PriceHistory:
    """Every version of the sandbox's price, newest first, then the built-in default."""
    return await price_history(SANDBOX, p, limit)


@router.put("/prices/{model:path}", response_model=PriceOut, status_code=200,
            responses=_put_responses(PriceHistory=_HISTORY, RegisterAccount=_SERVE_IT))
async def put_price(
    model: ModelToPrice, body: PutPrice, response: Response, p: PlatformDep,
) -> PriceOut:
    """Add a version of a model's price (any model: one the platform has never heard of
    becomes servable once priced). 201: created; 200: this exact version existed already."""
    return await _put(p, PriceVersion(model, body.effective_from, Price(
        body.input_per_m, body.cached_input_per_m, body.output_per_m,
        body.cache_write_per_m)), response)


_PricePage = Annotated[PageRequest, Depends(keyed_by(MODEL_PATTERN))]


@router.get("/prices", response_model=PricePage, responses={200: links(
    RegisterAccount=to("POST", "/admin/v1/model-accounts", "An account that serves the first "
                       "model listed (priced, it can be).",
                       body={"models": ["$response.body#/data/0/model"]}))})
async def list_prices(page: _PricePage, p: PlatformDep) -> PricePage:
    """Each model's price in force now — the operator's, or the built-in default — and the
    sandbox's, by model name."""
    found = await prices.in_force_page(p.db, page.position(_MODEL_CURSOR), page.limit)
    return page.answer(PricePage, found, lambda v: _out(v, True), key=lambda v: v.model)


@router.get("/prices/{model:path}", response_model=PriceHistory)
async def price_history(
    model: ModelPath, p: PlatformDep, limit: Annotated[LongPageLimit, Query()] = 100,
) -> PriceHistory:
    """Every version of a model's price, newest first (scheduled ones included)."""
    versions: list[PriceVersion] = await prices.history(p.db, model, limit)
    default = prices.default_for(model)
    if default is not None:
        versions.append(default)
    if not versions:
        raise NotFound(f"No price for {model!r}: set one with PUT /admin/v1/prices/{model}.")
    now = datetime.now(UTC)
    current = next((v for v in versions
                    if v.effective_from is None or v.effective_from <= now), None)
    return PriceHistory(model=model, data=[_out(v, v is current) for v in versions])
