"""Operator API for prices: any model the operator prices can be served (DESIGN §8).

Model names contain ``/``, ``:`` and ``.`` (``meta-llama/Llama-3.1-8B-Instruct``,
``qwen2.5:7b``), so the routes take the rest of the path as the name (``{model:path}``)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated

from fastapi import APIRouter, Depends, Path, Query, Response
from pydantic import AwareDatetime, BaseModel, ConfigDict, Field

from tenantry.api.auth import operator, platform
from tenantry.api.pages import PageRequest, matching, page_request
from tenantry.api.params import LongPageLimit
from tenantry.api.platform import Platform
from tenantry.errors import NotFound, ValidationFailed
from tenantry.ledger import prices
from tenantry.ledger.prices import PriceVersion
from tenantry.ledger.pricing import MAX_MICROS, SANDBOX, Price, SandboxPrice

router = APIRouter(prefix="/admin/v1", tags=["operator"], dependencies=[Depends(operator)])

#: A model name as accounts and prices take it: no whitespace, control characters or `*`.
MODEL_PATTERN = r"^[^\s\x00-\x1f\x7f*]{1,200}$"
_MODEL_CURSOR = matching(MODEL_PATTERN)
Micros = Annotated[int, Field(ge=0, le=MAX_MICROS, strict=True)]
ModelPath = Annotated[str, Path(
    min_length=1, max_length=200, pattern=MODEL_PATTERN,
    description="The model's name as agents and accounts use it (may contain `/`, `:`, "
                "`.`), or `sandbox` for the price of a second of sandbox time.")]
_TOKEN_FIELDS = ("input_per_m", "cached_input_per_m", "output_per_m")


class PutPrice(BaseModel):
    """A new version of a model's price, in micro-dollars per million tokens (or, for
    `sandbox`, per second)."""

    model_config = ConfigDict(extra="forbid")
    input_per_m: Micros | None = Field(default=None, description="Plain input tokens. "
                                       "Required for a model.")
    cached_input_per_m: Micros | None = Field(default=None, description="Input read from "
                                              "the provider's prompt cache. Required for a "
                                              "model.")
    cache_write_per_m: Micros | None = Field(default=None, description="Input written to "
                                             "the prompt cache; omitted: the input price.")
    output_per_m: Micros | None = Field(default=None, description="Output tokens. "
                                        "Required for a model.")
    per_second_micros: Micros | None = Field(default=None, description="Only for "
                                             "`sandbox`: a second of sandbox execution "
                                             "time.")
    effective_from: AwareDatetime | None = Field(
        default=None, description="When this version takes effect, with a timezone; not in "
                                  "the past (a call already billed keeps its price). "
                                  "Omitted: now. Workers apply it within 5 s of this time.")


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


def _version(model: str, body: PutPrice) -> PriceVersion:
    given = body.model_fields_set - {"effective_from"}
    if model == SANDBOX:
        if body.per_second_micros is None or given - {"per_second_micros"}:
            raise ValidationFailed("sandbox: the sandbox is priced by per_second_micros alone")
        return PriceVersion(model, body.effective_from,
                            sandbox=SandboxPrice(body.per_second_micros))
    missing = [name for name in _TOKEN_FIELDS if getattr(body, name) is None]
    if missing:
        raise ValidationFailed(f"{', '.join(missing)}: required to price a model")
    if body.per_second_micros is not None:
        raise ValidationFailed("per_second_micros: only the sandbox is priced per second")
    assert body.input_per_m is not None and body.cached_input_per_m is not None
    assert body.output_per_m is not None
    return PriceVersion(model, body.effective_from, Price(
        body.input_per_m, body.cached_input_per_m, body.output_per_m,
        body.cache_write_per_m))


@router.put("/prices/{model:path}", response_model=PriceOut, status_code=200,
            responses={201: {"description": "A new version", "model": PriceOut}})
async def put_price(model: ModelPath, body: PutPrice, response: Response,
                    p: Platform = Depends(platform)) -> PriceOut:
    """Add a version of a model's price (any model: one the platform has never heard of
    becomes servable once priced). 201: created; 200: this exact version existed already;
    409: that version exists with another price (versions never change)."""
    version, created = await prices.put(p.db, _version(model, body),
                                        at_now=body.effective_from is None)
    response.status_code = 201 if created else 200
    assert version.effective_from is not None
    return _out(version, version.effective_from <= datetime.now(UTC))


@router.get("/prices", response_model=PricePage)
async def list_prices(
    page: PageRequest = Depends(page_request), p: Platform = Depends(platform),
) -> PricePage:
    """Each model's price in force now — the operator's, or the built-in default — and the
    sandbox's, by model name."""
    found = await prices.in_force_page(p.db, page.position(_MODEL_CURSOR), page.limit)
    return PricePage(data=[_out(v, True) for v in found],
                     next_cursor=page.next_cursor(found, lambda v: v.model))


@router.get("/prices/{model:path}", response_model=PriceHistory)
async def price_history(
    model: ModelPath, limit: Annotated[LongPageLimit, Query()] = 100,
    p: Platform = Depends(platform),
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
