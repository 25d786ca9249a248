"""Node packages the tests run (third-party MCP servers, the MCP conformance suite),
installed with npm on first use into a cache folder kept across checkouts
(``$XDG_CACHE_HOME/tenantry-tests/``, else ``~/.cache/…``), each pinned to one version.

node and npm are in scripts/system-packages.txt, so `make test` runs the tests that need
them; ``needs_node`` skips them, saying why, only where node or npm is missing."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

needs_node = pytest.mark.skipif(
    shutil.which("node") is None or shutil.which("npm") is None,
    reason="node or npm is not installed (nodejs: scripts/system-packages.txt); "
           "the third-party MCP programs run on node")


def cache_folder(name: str) -> Path:
    root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return root / "tenantry-tests" / name


def installed(folder: Path, packages: list[str], *, marker: Path) -> Path:
    """``folder`` with ``packages`` (``name@version``) installed, unless ``marker`` (a file
    the install leaves) is already there. npm, ~10 s once per folder."""
    if marker.exists():
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    result = subprocess.run(
        ["npm", "install", "--no-audit", "--no-fund", "--loglevel=error", "--prefix",
         str(folder), *packages],
        capture_output=True, text=True, timeout=300, check=False)
    if result.returncode != 0 or not marker.exists():
        raise RuntimeError(f"npm install {' '.join(packages)} failed:\n{result.stderr[-2000:]}")
    return folder
