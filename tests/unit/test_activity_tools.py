"""How an agent version names an activity as a tool, and what the model sees of it
(agents/activity_tools.py, ADR 0015)."""

from __future__ import annotations

import re

from tenantry.agents import activity_tools
from tenantry.agents.activity_tools import ActivityTool


def test_entries_parse_with_or_without_a_pinned_version() -> None:
    assert activity_tools.parse("activity:send_invoice") == ActivityTool(
        "activity:send_invoice", "send_invoice", None)
    assert activity_tools.parse("activity:books.close@12") == ActivityTool(
        "activity:books.close@12", "books.close", 12)
    for entry in ("send_invoice", "activity:", "activity:x@0", "activity:x@", "activity:-x",
                  "activity:x@1@2"):
        assert activity_tools.parse(entry) is None, entry


def test_the_model_sees_a_function_name_providers_accept_and_any_json_object() -> None:
    tool = activity_tools.parse("activity:crm/books.close:v2@3")
    assert tool is not None
    definition = tool.definition()["function"]
    assert definition["name"] == "crm_books_close_v2"
    assert re.fullmatch(r"[A-Za-z0-9_-]{1,64}", definition["name"])
    assert "version 3" in definition["description"]
    assert definition["parameters"]["type"] == "object"
    long = activity_tools.parse("activity:" + "a" * 128)
    assert long is not None and len(long.function_name) == 64


def test_a_version_may_not_show_the_model_one_name_twice() -> None:
    assert activity_tools.problems(["lookup", "activity:send_invoice"]) == []
    assert activity_tools.problems(["send_invoice", "activity:send_invoice"])
    assert activity_tools.problems(["activity:a.b", "activity:a_b@2"])
    assert activity_tools.problems(["activity:"])
    assert activity_tools.resolve(["activity:a.b@2"], "a_b") == ActivityTool(
        "activity:a.b@2", "a.b", 2)
    assert activity_tools.resolve(["activity:a.b@2"], "activity:a.b@2") is not None
    assert activity_tools.resolve(["activity:a.b@2"], "a.b") is None
