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
from typing import Annotated
from urllib.parse import urlsplit

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, JsonValue

from tenantry.jsonutil import dumps

INT4_MAX = 2**31 - 1
INT8_MAX = 2**63 - 1
#: The integers a JSON value may hold: what the encoder (orjson) writes, signed or unsigned.
JSON_INT_MIN, JSON_INT_MAX = -(2**63), 2**64 - 1


class Body(BaseModel):
    """The base of every request body: unknown fields are refused, and values are not
    coerced (``"5"`` or ``true`` is not an integer, ``1`` is not a string)."""

    model_config = ConfigDict(extra="forbid", strict=True)


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


#: Any string stored or sent on: give it a length with ``Field(max_length=...)`` too.
Text = Annotated[str, AfterValidator(_storable_text),
                 Field(json_schema_extra={"pattern": _NO_NUL})]


def storable_json(value: JsonValue, where: str = "") -> JsonValue:
    """Refuse a NUL or a lone surrogate anywhere in a JSON value bound for ``jsonb``
    (keys included), and an integer past 64 bits (the JSON encoder cannot write it), naming
    where it is."""
    if isinstance(value, str):
        storable(value, where or "value")
    elif isinstance(value, int) and not isinstance(value, bool):
        if not JSON_INT_MIN <= value <= JSON_INT_MAX:
            raise ValueError(f"{where or 'value'}: integers must fit in 64 bits")
    elif isinstance(value, dict):
        for key, item in value.items():
            storable(key, f"{where or 'value'} key")
            storable_json(item, f"{where}.{key}" if where else key)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            storable_json(item, f"{where}[{index}]")
    return value


def bounded_json(value: JsonValue, where: str, max_bytes: int) -> JsonValue:
    """``storable_json``, and at most ``max_bytes`` once encoded."""
    storable_json(value, where)
    if len(dumps(value)) > max_bytes:
        raise ValueError(f"{where} must be at most {max_bytes} bytes as JSON")
    return value


# One label of a host name (letters, digits, '-', '_'; no empty labels), or an IP literal.
_LABEL = r"[A-Za-z0-9_]([A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?"
_URL_CHAR = r"[^\s\x00-\x1f\x7f-\x9f\ufeff]"
URL_PATTERN = (rf"^https?://({_LABEL}(\.{_LABEL})*\.?|\[[0-9A-Fa-f:.]+\])(:[0-9]{{1,5}})?"
               rf"([/?#]{_URL_CHAR}*)?$")
_URL = re.compile(URL_PATTERN)


def http_url(value: str) -> str:
    """An absolute http(s) URL an HTTP client can call as given: an ASCII host name
    (international names in their xn-- form) or an IP literal, an optional port 1-65535,
    no credentials (``user:pass@``), no whitespace or control characters. The document
    states the same pattern; the port range and the IPv6 literal are checked here."""
    if not value.startswith(("http://", "https://")):
        raise ValueError("URL must start with http:// or https://")
    if "@" in value.split("/", 3)[2]:
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
                               json_schema_extra={"pattern": URL_PATTERN}),
                    AfterValidator(http_url)]
