"""The constrained types every API input is built from, so the edge refuses (400
``validation_error``) what the database or a client could not take, and the OpenAPI
document states each rule: integers within their column, text Postgres can store, URLs a
client can call.

Postgres ``text`` and ``jsonb`` refuse NUL (``\\u0000``), and asyncpg cannot encode an
unpaired surrogate (JSON ``"\\ud800"`` parses to one): either would otherwise surface as
a 500 from deep inside a query."""

from __future__ import annotations

import ipaddress
import re
import types
import typing
from datetime import datetime
from functools import cache
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import (
    AfterValidator,
    AwareDatetime,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    JsonValue,
    ValidationInfo,
    WithJsonSchema,
    field_validator,
)

from tenantry.jsonutil import dumps

INT4_MAX = 2**31 - 1
INT8_MAX = 2**63 - 1
#: The integers a JSON value may hold: what the encoder (orjson) writes, signed or unsigned.
JSON_INT_MIN, JSON_INT_MAX = -(2**63), 2**64 - 1


def whole_number(value: object) -> object:
    """JSON has one kind of number, and JSON Schema's ``integer`` is any number with no
    fraction: ``5.0`` is the integer 5 (a client's encoder may write it so). Text, booleans
    and fractions stay refused."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


#: For an integer field of a model that is not a :class:`Body` (which does this itself).
WholeNumber = BeforeValidator(whole_number)


def _takes_integers(annotation: object) -> Literal["int", "list"] | None:
    """Whether a field holds an integer (``int``, ``X | None``, ``Annotated[int, ...]``),
    or a list of them; None for anything else (a float, or any JSON, keeps 5.0)."""
    if annotation is int:
        return "int"
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is Annotated:
        return _takes_integers(args[0])
    if origin in (typing.Union, types.UnionType):
        kinds = {_takes_integers(arg) for arg in args if arg is not type(None)}
        return kinds.pop() if len(kinds) == 1 else None
    if origin is list and len(args) == 1 and _takes_integers(args[0]) == "int":
        return "list"
    return None


class Body(BaseModel):
    """The base of every request body: unknown fields are refused, and values are not
    coerced (``"5"`` or ``true`` is not an integer, ``1`` is not a string); a number with
    no fraction is an integer, as JSON Schema has it (``whole_number``)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    @field_validator("*", mode="before")
    @classmethod
    def _whole_numbers(cls, value: Any, info: ValidationInfo) -> Any:
        if info.field_name is None:
            return value
        kind = _integer_field(cls, info.field_name)
        if kind == "int":
            return whole_number(value)
        if kind == "list" and isinstance(value, list):
            return [whole_number(item) for item in value]
        return value


@cache
def _integer_field(model: type[Body], name: str) -> Literal["int", "list"] | None:
    return _takes_integers(model.model_fields[name].annotation)


#: A Postgres ``integer`` column, and the positive ids and counts stored in one.
Int4 = Annotated[int, Field(ge=-(2**31), le=INT4_MAX)]
PositiveInt4 = Annotated[int, Field(ge=1, le=INT4_MAX)]
#: A Postgres ``bigint`` column.
Int8 = Annotated[int, Field(ge=-(2**63), le=INT8_MAX)]
NonNegativeInt8 = Annotated[int, Field(ge=0, le=INT8_MAX)]

#: Slugs and names made of ASCII letters: they exclude NUL and whitespace by construction.
SLUG_RE = r"^[a-z0-9][a-z0-9_-]{2,63}$"
LABEL_RE = r"^[a-z0-9][a-z0-9_-]{1,63}$"
SECRET_NAME_RE = r"^[A-Za-z0-9_.-]{1,128}$"
Slug = Annotated[str, Field(pattern=SLUG_RE)]
Label = Annotated[str, Field(pattern=LABEL_RE)]
SecretName = Annotated[str, Field(pattern=SECRET_NAME_RE)]

# Stated in the document: JSON Schema patterns are ECMA-262, where `\x00` is NUL.
_NO_NUL = r"^[^\x00]*$"
# Whitespace and control characters in any script, spelled out: `\s` means one set in the
# document's regexes (ECMA-262, with U+FEFF) and another in pydantic's (Rust, without),
# and Postgres's [:space:][:cntrl:] (the prices table's CHECK) is within this one.
SPACE_OR_CONTROL = (r"\t\n\v\f\r \x00-\x1f\x7f-\x9f\xa0\u1680\u2000-\u200a\u2028\u2029"
                    r"\u202f\u205f\u3000\ufeff")
#: A model name as prices take it: 1-200 characters, no whitespace, control character or
#: `*` (accounts' wildcards are not priced).
MODEL_NAME_PATTERN = rf"^[^{SPACE_OR_CONTROL}*]{{1,200}}$"


def storable(value: str, what: str = "text") -> str:
    if "\x00" in value:
        raise ValueError(f"{what} must not contain NUL (\\u0000)")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError(f"{what} must be valid Unicode (no unpaired surrogates)") from None
    return value


def _storable_text(value: str) -> str:
    return storable(value)


def _iso_time_text(value: object) -> object:
    """A time is text (RFC 3339, as the document's ``date-time`` says): pydantic would also
    read a number, or text that is only a number, as Unix seconds."""
    if not isinstance(value, str | datetime) or (
            isinstance(value, str) and re.fullmatch(r"[\s0-9.eE+-]*", value)):
        raise ValueError("must be an ISO 8601 time with a time zone, e.g. 2027-01-01T00:00:00Z")
    return value


#: A point in time, from text with a time zone (``Field(strict=False)`` in a Body: strict
#: models want a ``datetime`` object).
IsoTime = Annotated[AwareDatetime, BeforeValidator(_iso_time_text)]


#: Any string stored or sent on: give it a length with ``Field(max_length=...)`` too.
Text = Annotated[str, AfterValidator(_storable_text),
                 Field(json_schema_extra={"pattern": _NO_NUL})]


def storable_json(value: JsonValue, where: str = "") -> JsonValue:
    """Refuse a NUL or a lone surrogate anywhere in a JSON value bound for ``jsonb``
    (keys included), and a number past 64-bit integers (the JSON encoder cannot write such
    an integer), naming where it is. The document states it as ``StoredJson``."""
    if isinstance(value, str):
        storable(value, where or "value")
    elif isinstance(value, int | float) and not isinstance(value, bool):
        # Floats too: JSON Schema's numbers are not split by spelling (1e30 is the
        # integer 10^30), and any float past these bounds is a whole number.
        if not JSON_INT_MIN <= value <= JSON_INT_MAX:
            raise ValueError(f"{where or 'value'}: numbers must lie within -2^63 and "
                             "2^64-1 (integers must fit in 64 bits)")
    elif isinstance(value, dict):
        for key, item in value.items():
            storable(key, f"{where or 'value'} key")
            storable_json(item, f"{where}.{key}" if where else key)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            storable_json(item, f"{where}[{index}]")
    return value


#: ``storable_json`` as the OpenAPI document states it (components/schemas/StoredJson).
STORED_JSON_SCHEMA: dict[str, Any] = {
    "description": "Any JSON as it is stored: no string or object key contains NUL "
                   "(\\u0000), and numbers lie within -2^63 and 2^64-1.",
    "anyOf": [
        {"type": "null"},
        {"type": "boolean"},
        {"type": "number", "minimum": JSON_INT_MIN, "maximum": JSON_INT_MAX},
        {"type": "string", "pattern": _NO_NUL},
        {"type": "array", "items": {"$ref": "#/components/schemas/StoredJson"}},
        {"type": "object", "propertyNames": {"pattern": _NO_NUL},
         "additionalProperties": {"$ref": "#/components/schemas/StoredJson"}},
    ],
}
_STORED = {"$ref": "#/components/schemas/StoredJson"}
#: A JSON value checked by ``storable_json`` (or ``bounded_json``) in its model: the
#: annotations only say so in the document.
# (In an allOf: pydantic resolves a field's top-level $ref among its own definitions.)
StoredJson = Annotated[JsonValue, WithJsonSchema({"allOf": [_STORED]})]
#: The same, but not null.
StoredJsonNotNull = Annotated[JsonValue, WithJsonSchema(
    {"allOf": [_STORED], "not": {"type": "null"}})]
#: A JSON object whose values are StoredJson.
StoredJsonObject = Annotated[dict[str, JsonValue], WithJsonSchema(
    {"type": "object", "propertyNames": {"pattern": _NO_NUL}, "additionalProperties": _STORED})]


def bounded_json(value: JsonValue, where: str, max_bytes: int) -> JsonValue:
    """``storable_json``, and at most ``max_bytes`` once encoded."""
    storable_json(value, where)
    if len(dumps(value)) > max_bytes:
        raise ValueError(f"{where} must be at most {max_bytes} bytes as JSON")
    return value


def given(name: str) -> dict[str, Any]:
    """JSON Schema for "the body has ``name``, and it is not null"."""
    return {"required": [name], "properties": {name: {"not": {"type": "null"}}}}


def exactly_one_given(*names: str) -> dict[str, Any]:
    """A model's ``json_schema_extra`` when exactly one of ``names`` must be given."""
    return {"oneOf": [given(name) for name in names]}


def one_or_more_given(*names: str) -> dict[str, Any]:
    """A model's ``json_schema_extra`` when at least one of ``names`` must be given."""
    return {"anyOf": [given(name) for name in names]}


# One label of a host name (letters, digits, '-', '_'; no empty labels), or an IP literal:
# IPv6 as RFC 3986 spells it (what ipaddress.IPv6Address takes), without a zone.
_LABEL = r"[A-Za-z0-9_]([A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?"
_H16 = r"[0-9A-Fa-f]{1,4}"
_OCTET = r"(25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])"
_LS32 = rf"({_H16}:{_H16}|{_OCTET}(\.{_OCTET}){{3}})"
_IPV6 = "(" + "|".join([
    rf"({_H16}:){{6}}{_LS32}",
    rf"::({_H16}:){{5}}{_LS32}",
    rf"({_H16})?::({_H16}:){{4}}{_LS32}",
    rf"(({_H16}:){{0,1}}{_H16})?::({_H16}:){{3}}{_LS32}",
    rf"(({_H16}:){{0,2}}{_H16})?::({_H16}:){{2}}{_LS32}",
    rf"(({_H16}:){{0,3}}{_H16})?::{_H16}:{_LS32}",
    rf"(({_H16}:){{0,4}}{_H16})?::{_LS32}",
    rf"(({_H16}:){{0,5}}{_H16})?::{_H16}",
    rf"(({_H16}:){{0,6}}{_H16})?::",
]) + ")"
_URL_PORT = (r"([1-9][0-9]{0,3}|[1-5][0-9]{4}|6[0-4][0-9]{3}|65[0-4][0-9]{2}|655[0-2][0-9]"
             r"|6553[0-5])")
_URL_CHAR = rf"[^{SPACE_OR_CONTROL}]"
URL_PATTERN = (rf"^https?://({_LABEL}(\.{_LABEL})*\.?|\[{_IPV6}\])(:{_URL_PORT})?"
               rf"([/?#]{_URL_CHAR}*)?$")
#: A host name is at most 253 characters: JSON Schema says it as "not this" (the pattern
#: cannot count across labels).
LONG_HOST_PATTERN = r"^https?://[^:/?#\[\]]{254}"
_URL = re.compile(URL_PATTERN)


def http_url(value: str) -> str:
    """An absolute http(s) URL an HTTP client can call as given: an ASCII host name
    (international names in their xn-- form, at most 253 characters) or an IP literal, an
    optional port 1-65535, no credentials (``user:pass@``), no whitespace or control
    characters. The document states the same rules (URL_PATTERN, LONG_HOST_PATTERN)."""
    if not value.startswith(("http://", "https://")):
        raise ValueError("URL must start with http:// or https://")
    if "@" in re.split(r"[/?#]", value.split("//", 1)[1], maxsplit=1)[0]:  # the authority
        raise ValueError("URL must not carry credentials (user:password@); use a secret")
    if not _URL.fullmatch(value):
        raise ValueError("not an http(s) URL with a host name or IP address (no credentials, "
                         "whitespace or control characters)")
    parts = urlsplit(value)
    try:
        port = parts.port
        host = parts.hostname or ""
    except ValueError as exc:
        raise ValueError(f"not a URL: {exc}") from None
    if port == 0:
        raise ValueError("URL port must be 1-65535")
    if parts.netloc.startswith("["):
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            raise ValueError("URL host is not an IPv6 address") from None
    elif len(host) > 253:
        raise ValueError("URL host name is longer than 253 characters")
    return value


#: An http(s) URL of at most 2048 characters (see ``http_url``).
HttpUrl = Annotated[str, Field(min_length=8, max_length=2048,
                               json_schema_extra={"pattern": URL_PATTERN,
                                                  "not": {"pattern": LONG_HOST_PATTERN}}),
                    AfterValidator(http_url)]


# A sandbox egress entry (docs/how-to/sandboxes.md#network-egress): a host name or IPv4
# address, or `*.` and a domain of two or more labels whose last starts with a letter (never
# an address), and an optional port 1-65535. Stricter than the proxy's own parser
# (egress/policy.py), which takes every entry of this pattern.
_HOST_LABEL = r"[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_TOP_LABEL = r"[A-Za-z]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_PORT = (r"([1-9][0-9]{0,3}|[1-5][0-9]{4}|6[0-4][0-9]{3}|65[0-4][0-9]{2}|655[0-2][0-9]"
         r"|6553[0-5])")
EGRESS_HOST_PATTERN = (rf"^(\*\.({_HOST_LABEL}\.)+{_TOP_LABEL}|({_HOST_LABEL}\.)*{_HOST_LABEL})"
                       rf"(:{_PORT})?$")
EgressHost = Annotated[str, Field(max_length=253, pattern=EGRESS_HOST_PATTERN)]
#: The names of EGRESS_HOST_PATTERN alone: two or more labels, the last starting with a
#: letter, so never an address in any spelling.
PUBLIC_HOST_PATTERN = rf"^(\*\.)?({_HOST_LABEL}\.)+{_TOP_LABEL}(:{_PORT})?$"

