"""The layering contracts in pyproject.toml hold for the real tree, and they are not
decorative: a forbidden import in a copy of the tree breaks them. The sandbox guest, which
import-linter cannot fully check (it sees only tenantry's modules), imports only the
standard library; the client SDK only the standard library, httpx2 and orjson (and of
tenantry, its errors and the two helpers it shares with the server: sse and backoff)."""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src"
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def lint_imports(cwd: Path, pythonpath: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(pythonpath)}
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache", "--config", str(cwd / "pyproject.toml")],
        cwd=cwd, env=env, capture_output=True, text=True, check=False,
    )


def test_the_tree_keeps_every_contract() -> None:
    result = lint_imports(ROOT, SRC)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


def test_product_code_importing_the_testing_helpers_breaks_a_contract(tmp_path: Path) -> None:
    shutil.copytree(SRC / "tenantry", tmp_path / "tenantry",
                    ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    (tmp_path / "tenantry" / "runs" / "_bad.py").write_text(
        '"""Product code that reaches for a test helper."""\n\n'
        "from tenantry.testing import FakeModelServer\n\n"
        "__all__ = ['FakeModelServer']\n")

    result = lint_imports(tmp_path, tmp_path)

    assert result.returncode != 0, result.stdout
    assert "Product code never imports tenantry.testing" in result.stdout
    assert "BROKEN" in result.stdout
    assert "tenantry.runs._bad -> tenantry.testing" in result.stdout


def test_a_step_importing_the_driver_breaks_the_acyclic_contract(tmp_path: Path) -> None:
    shutil.copytree(SRC / "tenantry", tmp_path / "tenantry",
                    ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    step = tmp_path / "tenantry" / "runs" / "tool_step.py"
    step.write_text(step.read_text() + "\n\ndef _driver() -> object:\n"
                    "    from tenantry.runs.driver import RunDriver\n\n    return RunDriver\n")

    result = lint_imports(tmp_path, tmp_path)

    assert result.returncode != 0, result.stdout
    assert "No package has an import cycle" in result.stdout
    assert "No cycles are allowed in tenantry.runs." in result.stdout


def _third_party(folder: Path, allowed: tuple[str, ...], exact: tuple[str, ...] = ()) -> list[str]:
    """Imports of ``folder``'s modules outside the standard library, the ``allowed``
    packages and the ``exact`` modules."""
    outside: list[str] = []
    modules = sorted(folder.glob("*.py"))
    assert modules
    for module in modules:
        for node in ast.walk(ast.parse(module.read_text(), filename=str(module))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                if (name.split(".")[0] not in sys.stdlib_module_names
                        and name not in exact
                        and not any(name == a or name.startswith(a + ".") for a in allowed)):
                    outside.append(f"{module.name}:{node.lineno}: {name}")
    return outside


def test_the_sandbox_guest_imports_only_the_standard_library() -> None:
    guest = SRC / "tenantry" / "sandbox" / "guest"
    assert _third_party(guest, ("tenantry.sandbox.guest",)) == []


def test_the_client_sdk_imports_only_httpx2_and_orjson_beside_the_standard_library() -> None:
    client = SRC / "tenantry" / "client"
    assert _third_party(client, ("tenantry.client", "tenantry.errors", "tenantry.sse",
                                 "tenantry.backoff", "httpx2", "orjson"),
                        exact=("tenantry",)) == []
    # Imported in a fresh interpreter, it loads nothing of the server.
    loaded = subprocess.run(
        [sys.executable, "-c", "import sys, tenantry.client; print(' '.join(sys.modules))"],
        capture_output=True, text=True, check=True, env={**os.environ, "PYTHONPATH": str(SRC)},
    ).stdout.split()
    ours = sorted(m for m in loaded if m.split(".")[0] == "tenantry"
                  and not m.startswith("tenantry.client"))
    assert ours == ["tenantry", "tenantry.backoff", "tenantry.errors", "tenantry.ids",
                    "tenantry.sse"]
    assert not {"fastapi", "starlette", "pydantic", "asyncpg", "uvicorn", "mcp"} & {
        m.split(".")[0] for m in loaded}
