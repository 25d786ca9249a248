"""The two distributions of this repository (ADR 0038) split the tree without a gap or an
overlap: the files tenantry-client ships (clients/python/hatch_build.py) are exactly those
the server's wheel leaves out, they hold every module of tenantry that `import
tenantry.client` loads, it depends on what the SDK imports, and the server requires
the client of its own release."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import tenantry

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src"


def _client_files() -> set[str]:
    hook = ast.parse((ROOT / "clients" / "python" / "hatch_build.py").read_text())
    [shipped] = [node.value for node in ast.walk(hook) if isinstance(node, ast.Assign)
                 and any(isinstance(t, ast.Name) and t.id == "SHIPPED" for t in node.targets)]
    return set(ast.literal_eval(shipped))


def test_the_client_ships_exactly_what_the_server_leaves_out() -> None:
    server = tomllib.loads((ROOT / "pyproject.toml").read_text())
    excluded = server["tool"]["hatch"]["build"]["targets"]["wheel"]["exclude"]
    assert {path.removeprefix("src/") for path in excluded} == _client_files()


def test_the_client_ships_every_module_it_imports() -> None:
    loaded = subprocess.run(
        [sys.executable, "-c", "import sys, tenantry.client\n"
         "print('\\n'.join(m.__file__ for n, m in sys.modules.items()"
         " if n.split('.')[0] == 'tenantry'))"],
        capture_output=True, text=True, check=True, env={**os.environ, "PYTHONPATH": str(SRC)},
    ).stdout.split()
    shipped = _client_files()
    outside = [path for path in loaded
               if not any(Path(path).relative_to(SRC).as_posix() == f or
                          Path(path).relative_to(SRC).as_posix().startswith(f + "/")
                          for f in shipped)]
    assert loaded and outside == []


def test_the_server_requires_the_client_of_its_own_release() -> None:
    server = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert f"tenantry-client=={tenantry.__version__}" in server["dependencies"]
    client = tomllib.loads((ROOT / "clients" / "python" / "pyproject.toml").read_text())
    assert client["project"]["name"] == "tenantry-client"
    # What the SDK imports beside the standard library (tests/unit/test_import_contracts.py).
    assert {re.split(r"[<>=!~ ;\[]", d)[0] for d in client["project"]["dependencies"]} == {
        "httpx2", "orjson"}
