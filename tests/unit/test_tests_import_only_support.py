"""No test module imports another test module (or a conftest): what tests share lives in
tests/support/, so moving or deleting one test never breaks another."""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def imported_modules(path: Path) -> list[tuple[int, str]]:
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.lineno, node.module))
        elif isinstance(node, ast.ImportFrom):
            found.append((node.lineno, "." * node.level + (node.module or "")))
    return found


def test_tests_import_nothing_from_tests_but_tests_support() -> None:
    modules = sorted({*TESTS.rglob("test_*.py"), *TESTS.rglob("conftest.py")})
    assert len(modules) > 50
    wrong = [
        f"{path.relative_to(TESTS.parent)}:{line}: {name}"
        for path in modules
        for line, name in imported_modules(path)
        if name.startswith(".") or (
            name.split(".")[0] == "tests"
            and name != "tests.support" and not name.startswith("tests.support."))
    ]
    assert wrong == []
