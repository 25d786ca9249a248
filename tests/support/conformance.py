"""Schemathesis hooks (``schemathesis.toml`` names this module): the rules the OpenAPI
document states in prose because JSON Schema cannot — one field relative to another —
taught to the generator, so a request it calls valid is one the API takes. Only cases
generated as valid are changed, and only in what such a rule concerns; everything a
field's own schema says is the document's, enforced at the edge and checked as such.
(And one thing about sending: no generated path value holds a ``%``; see
``filter_path_parameters``.)

Each rule is the document's (its description says it; docs/reference/api.md too):

- ``GET /v1/usage``, ``GET /admin/v1/usage``: ``from`` is not after ``to`` (defaults: the
  1st of this month, today), at most 366 days apart.
- ``POST /admin/v1/billing/reconcile``: ``from`` is not after ``to``, at most 366 days
  apart.
- an agent version (``POST /v1/agents``, ``POST /v1/agents/{agent_id}/versions``):
  ``needs_approval`` lists only tools of ``tools``; no two entries of ``tools`` are shown
  to the model under one name; ``children`` names each agent once.
- an activity version (``POST /v1/activities``, ``POST /v1/activities/{name}/versions``):
  the entrypoint's module is a file of the bundle, and no file is also a folder of
  another.
- a test set's ``answer_matches`` is a regular expression the API accepts (what
  ``ChecksBody`` says: JSON Schema's ``format: regex`` is another dialect)."""

from __future__ import annotations

import base64
import copy
import re
from datetime import UTC, date, datetime, timedelta
from typing import Any

import schemathesis
from pydantic import ValidationError
from schemathesis import Case
from schemathesis.hooks import HookContext

from tenantry.api.evaluation_bodies import ChecksBody

MAX_WINDOW_DAYS = 366
_FUNCTION_CHARS = re.compile(r"[^A-Za-z0-9_-]")
_ACTIVITY = re.compile(r"^activity:([A-Za-z0-9][A-Za-z0-9_.:/-]{0,127}?)(?:@[1-9][0-9]{0,8})?$")


def _is_valid(case: Case) -> bool:
    return case.meta is not None and case.meta.generation.mode.is_positive


def _day(value: object) -> date | None:
    try:
        return date.fromisoformat(value) if isinstance(value, str) else None
    except ValueError:
        return None


def _usage_window(query: dict[str, Any]) -> None:
    today = datetime.now(UTC).date()
    first = today.replace(day=1)
    start, end = _day(query.get("from")), _day(query.get("to"))
    if ("from" in query and start is None) or ("to" in query and end is None):
        return  # not a date: the schema's to judge
    window = timedelta(days=MAX_WINDOW_DAYS)
    if start is not None and end is not None:
        start, end = min(start, end), max(start, end)
        end = min(end, start + window, date.max - timedelta(days=1))
        start = min(start, end)
        query["from"], query["to"] = start.isoformat(), end.isoformat()
    elif start is not None:  # to: today
        query["from"] = min(max(start, today - window), today).isoformat()
    elif end is not None:  # from: the 1st of this month
        query["to"] = min(max(end, first), first + window).isoformat()


def _reconcile_window(body: dict[str, Any]) -> None:
    start, end = _day(body.get("from")), _day(body.get("to"))
    if start is not None and end is not None:
        start, end = min(start, end), max(start, end)
        # 366 days with both ends included, within the years the schema allows.
        end = min(end, start + timedelta(days=MAX_WINDOW_DAYS - 1), date(2099, 12, 31))
        body["from"], body["to"] = start.isoformat(), end.isoformat()


def _shown_as(entry: str) -> str:
    """What the model is shown for a tools entry (agents/activity_tools.py)."""
    match = _ACTIVITY.fullmatch(entry)
    return _FUNCTION_CHARS.sub("_", match.group(1))[:64] if match else entry


def _agent_version(body: dict[str, Any]) -> None:
    if isinstance(body.get("tools"), list):
        shown: set[str] = set()
        kept = []
        for entry in body["tools"]:
            if isinstance(entry, str) and _shown_as(entry) not in shown:
                shown.add(_shown_as(entry))
                kept.append(entry)
        body["tools"] = kept
    tools = body.get("tools") or []
    if isinstance(body.get("needs_approval"), list):
        body["needs_approval"] = [t for t in body["needs_approval"] if t in tools]
    if isinstance(body.get("children"), list):
        seen: set[object] = set()
        children = []
        for child in body["children"]:
            agent = child.get("agent_id") if isinstance(child, dict) else None
            if agent not in seen:
                seen.add(agent)
                children.append(child)
        body["children"] = children


def _activity_version(body: dict[str, Any]) -> None:
    files, entrypoint = body.get("files"), body.get("entrypoint")
    if not isinstance(files, dict) or not files or not isinstance(entrypoint, str):
        return
    module = entrypoint.partition(":")[0]
    if module not in files:
        # The entrypoint's module takes the place of one file (the count stays in bounds).
        files.pop(next(iter(files)))
        files[module] = base64.b64encode(b"def handle(value, context):\n    return value\n"
                                         ).decode()
    # A file is not also a folder: drop the files under another file's path.
    for path in sorted(files, key=len):
        if path in files and path != module:
            for other in [p for p in files if p.startswith(path + "/")]:
                del files[other]
    for path in list(files):
        if path != module and module.startswith(path + "/"):
            del files[path]


def _test_set(body: dict[str, Any]) -> None:
    for case in body.get("cases") or []:
        checks = case.get("checks") if isinstance(case, dict) else None
        if isinstance(checks, dict) and isinstance(checks.get("answer_matches"), str):
            try:
                ChecksBody.model_validate({"answer_matches": checks["answer_matches"]})
            except ValidationError:
                checks["answer_matches"] = "[Dd]one"


_BODY_RULES = {
    "POST /admin/v1/billing/reconcile": _reconcile_window,
    "POST /v1/agents": _agent_version,
    "POST /v1/agents/{agent_id}/versions": _agent_version,
    "POST /v1/activities": _activity_version,
    "POST /v1/activities/{name}/versions": _activity_version,
    "POST /v1/agents/{agent_id}/test-sets": _test_set,
}
_QUERY_RULES = {
    "GET /v1/usage": _usage_window,
    "GET /admin/v1/usage": _usage_window,
}


@schemathesis.hook
def filter_path_parameters(context: HookContext,
                           path_parameters: dict[str, Any] | None) -> bool:
    """Schemathesis reads a ``%`` in a generated path value as an escape (it unquotes the
    value before quoting it: ``a%41`` is sent as ``aA``, ``a%13`` as a control character),
    so the API would judge another value than the one generated: leave those out."""
    return not any(isinstance(value, str) and "%" in value
                   for value in (path_parameters or {}).values())


@schemathesis.hook
def before_call(context: HookContext, case: Case, kwargs: dict[str, Any]) -> None:
    # Just before sending, when every phase has made its case (the stateful phase merges a
    # link's values into a generated body after generation); on copies, assigned: a case
    # may share parts with others. Schemathesis judges again what is sent.
    if not _is_valid(case):
        return
    label = case.operation.label
    if label in _BODY_RULES and isinstance(case.body, dict):
        body = copy.deepcopy(case.body)
        _BODY_RULES[label](body)
        case.body = body
    if label in _QUERY_RULES and isinstance(case.query, dict):
        query = dict(case.query)
        _QUERY_RULES[label](query)
        case.query = query
