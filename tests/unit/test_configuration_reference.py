"""Each ``TENANTRY_*`` variable is declared once (src/tenantry/config/variables/): the
settings loader, the flags and the configuration reference all come from it, so the
committed reference is the generated one and no variable is read without a declaration."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from tenantry.cli import reference
from tenantry.config import VARIABLES, Settings

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(("path", "table"), [
    (reference.CONFIGURATION, reference.configuration_table),
    (reference.CLI, reference.shared_options_table),
], ids=["configuration.md", "cli.md"])
def test_the_committed_reference_is_the_generated_one(path: Path, table: object) -> None:
    committed = (ROOT / path).read_text()
    assert callable(table)
    assert committed == reference.rewrite(committed, table()), (
        f"{path} is stale: run `make reference`")


def test_each_variable_is_declared_once_and_fills_a_setting_that_exists() -> None:
    names = [variable.env for variable in VARIABLES]
    assert len(names) == len(set(names))
    settings = {field.name for field in dataclasses.fields(Settings)}
    assert {v.field for v in VARIABLES if v.field is not None} <= settings
    assert [v.env for v in VARIABLES if (v.flag is None) != (v.help is None)] == []


def test_no_variable_is_read_without_a_declaration() -> None:
    # TENANTRY_IDEMPOTENCY_KEY is set inside a sandbox for the tenant's code, not read.
    declared = {variable.env for variable in VARIABLES} | {"TENANTRY_IDEMPOTENCY_KEY"}
    named = {name for path in (ROOT / "src" / "tenantry").rglob("*.py")
             for name in re.findall(r"\bTENANTRY_[A-Z0-9_]*[A-Z0-9]\b", path.read_text())}
    assert named - declared == set()
