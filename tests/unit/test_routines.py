"""Routine files (ADR 0037): what each defines, the order they are applied in, and the
rules a file is refused for, with the line that says why."""

from __future__ import annotations

from pathlib import Path

import pytest

from tenantry.db.schema_files import Schema, contract_steps, parse_routine, routines
from tenantry.errors import ConfigurationError

TRIGGER_FUNCTION = """\
-- Why it exists.
-- requires: helper, other_helper
CREATE OR REPLACE FUNCTION tenantry_stamp() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    -- CREATE OR REPLACE TRIGGER ignored ON inside_the_body: text, not a statement
    RETURN NEW;
END
$$;
REVOKE ALL ON FUNCTION tenantry_stamp() FROM PUBLIC, tenantry_app, tenantry_console;

CREATE OR REPLACE TRIGGER items_stamp BEFORE INSERT OR UPDATE OF label
    ON public.items FOR EACH ROW EXECUTE FUNCTION tenantry_stamp();
CREATE OR REPLACE TRIGGER things_stamp
    BEFORE UPDATE ON things
    FOR EACH ROW WHEN (NEW.x IS DISTINCT FROM OLD.x) EXECUTE FUNCTION tenantry_stamp();
"""


def test_a_routine_names_its_function_its_triggers_and_what_it_requires() -> None:
    routine = parse_routine("stamp", TRIGGER_FUNCTION)
    assert routine.objects == (("function", "tenantry_stamp"),
                               ("trigger", "items.items_stamp"),
                               ("trigger", "things.things_stamp"))
    assert (routine.requires, routine.early, routine.kind) == (
        ("helper", "other_helper"), False, "function")


def test_an_early_routine_and_a_view() -> None:
    early = parse_routine("current", "-- phase: early\nCREATE OR REPLACE FUNCTION "
                                     "tenantry_current() RETURNS text LANGUAGE sql AS $$ "
                                     "SELECT 'x' $$;\n")
    assert early.early
    view = parse_routine("item_labels", "CREATE OR REPLACE VIEW item_labels AS "
                                        "SELECT 1 AS id;\nGRANT SELECT ON item_labels TO x;\n")
    assert (view.objects, view.kind) == ((("view", "item_labels"),), "view")


@pytest.mark.parametrize(("name", "sql", "says"), [
    ("stamp", "CREATE FUNCTION tenantry_stamp() RETURNS int LANGUAGE sql AS $$ SELECT 1 $$;",
     "CREATE FUNCTION tenantry_stamp needs OR REPLACE"),
    ("stamp", TRIGGER_FUNCTION.replace("CREATE OR REPLACE TRIGGER things",
                                       "CREATE TRIGGER things"),
     "CREATE TRIGGER things_stamp needs OR REPLACE"),
    ("stamp", "CREATE OR REPLACE FUNCTION tenantry_other() RETURNS int LANGUAGE sql "
              "AS $$ SELECT 1 $$;", "named after the file"),
    ("stamp", "CREATE OR REPLACE FUNCTION tenantry_stamp() RETURNS int LANGUAGE sql "
              "AS $$ SELECT 1 $$;\nCREATE OR REPLACE FUNCTION tenantry_stamp(a int) RETURNS "
              "int LANGUAGE sql AS $$ SELECT a $$;", "defines one function or view"),
    ("stamp", "-- only a comment\n", "defines one function or view"),
    ("stamp", "-- phase: late\n" + TRIGGER_FUNCTION, "unknown phase 'late'"),
])
def test_a_routine_file_that_breaks_a_rule_is_refused(name: str, sql: str, says: str) -> None:
    with pytest.raises(ConfigurationError, match=f"^routine {name}: .*{says}"):
        parse_routine(name, sql)


def _schema(tmp_path: Path, files: dict[str, str]) -> Schema:
    for part in ("migrations", "routines"):
        (tmp_path / part).mkdir()
    for name, sql in files.items():
        (tmp_path / "routines" / f"{name}.sql").write_text(sql)
    return Schema(tmp_path / "migrations", "records", 1, routines=tmp_path / "routines")


def _function(name: str, requires: str = "") -> str:
    head = f"-- requires: {requires}\n" if requires else ""
    return (f"{head}CREATE OR REPLACE FUNCTION tenantry_{name}() RETURNS int "
            f"LANGUAGE sql AS $$ SELECT 1 $$;\n")


def test_routines_come_after_what_they_require_functions_before_views(tmp_path: Path) -> None:
    schema = _schema(tmp_path, {
        "a_view": "-- requires: zeta\nCREATE OR REPLACE VIEW a_view AS SELECT tenantry_zeta();",
        "b_view": "CREATE OR REPLACE VIEW b_view AS SELECT 1 AS one;",
        "zeta": _function("zeta"),
        "alpha": _function("alpha", "omega"),
        "omega": _function("omega"),
    })
    assert [r.name for r in routines(schema)] == ["omega", "alpha", "zeta", "a_view", "b_view"]


@pytest.mark.parametrize(("files", "says"), [
    ({"alpha": _function("alpha", "beta"), "beta": _function("beta", "alpha")},
     "routines require each other in a cycle: alpha, beta"),
    ({"alpha": _function("alpha", "nothing")}, "routine alpha requires nothing: no such"),
])
def test_an_order_that_cannot_be_kept_is_refused(
    tmp_path: Path, files: dict[str, str], says: str,
) -> None:
    with pytest.raises(ConfigurationError, match=says):
        routines(_schema(tmp_path, files))


def test_the_cells_routines_each_define_what_their_name_says() -> None:
    found = routines()
    assert [r.name for r in found if r.early] == ["current_tenant"]
    assert all(r.objects[0][1] == f"tenantry_{r.name}" for r in found)


@pytest.mark.parametrize("drop", [
    "DROP FUNCTION tenantry_zeta();",
    "DROP FUNCTION IF EXISTS public.tenantry_zeta(integer, text);",
    "DROP TRIGGER IF EXISTS items_zeta ON public.items;",
])
def test_a_migration_may_not_drop_what_a_routine_file_makes_again(
    tmp_path: Path, drop: str,
) -> None:
    schema = _schema(tmp_path, {"zeta": _function("zeta") + (
        "CREATE OR REPLACE TRIGGER items_zeta AFTER INSERT ON items\n"
        "    FOR EACH ROW EXECUTE FUNCTION tenantry_zeta();\n")})
    (tmp_path / "migrations" / "0001_items.sql").write_text("CREATE TABLE items (id integer);\n")
    assert [r.name for r in routines(schema)] == ["zeta"]
    # A view may be dropped (its routine brings it back); the drop in a comment is no drop.
    (tmp_path / "migrations" / "0002_view.sql").write_text("-- DROP FUNCTION tenantry_zeta();\n"
                                            "DROP VIEW IF EXISTS zeta_view;\n")
    assert [r.name for r in routines(schema)] == ["zeta"]
    (tmp_path / "migrations" / "0003_gone.sql").write_text(f"-- zeta is no more\n{drop}\n")
    with pytest.raises(ConfigurationError,
                       match=r"^migration 0003_gone drops (function tenantry|trigger items)_zeta, "
                             r"which routines/zeta\.sql makes again: delete the file"):
        routines(schema)


def test_a_contract_step_may_not_drop_or_retire_what_a_routine_file_makes_again(
    tmp_path: Path,
) -> None:
    """A contract step removes an old ``_vN`` whose file went with it; while the file
    stays, the routines step would make the function again at the next migrate."""
    schema = _schema(tmp_path, {"zeta": _function("zeta"), "zeta_v2": _function("zeta_v2")})
    (tmp_path / "contract").mkdir()
    schema = Schema(schema.package, schema.record_table, schema.lock_key,
                    routines=schema.routines, contract=tmp_path / "contract")
    step = tmp_path / "contract" / "0001_old_zeta.sql"
    step.write_text("-- retires: zeta\nDROP FUNCTION IF EXISTS tenantry_zeta();\n")
    with pytest.raises(ConfigurationError,
                       match=r"^contract step 0001_old_zeta retires zeta, whose file is still "
                             r"in routines/: delete it with the step$"):
        routines(schema)
    step.write_text("DROP FUNCTION IF EXISTS tenantry_zeta();\n")
    with pytest.raises(ConfigurationError,
                       match=r"^contract step 0001_old_zeta drops function tenantry_zeta, "
                             r"which routines/zeta\.sql makes again"):
        routines(schema)
    (tmp_path / "routines" / "zeta.sql").unlink()
    step.write_text("-- retires: zeta\nDROP FUNCTION IF EXISTS tenantry_zeta();\n")
    assert [r.name for r in routines(schema)] == ["zeta_v2"]
    assert [s.retires for s in contract_steps(schema)] == [("zeta",)]
