"""The command runs as a module too, the way a container's entrypoint or a debugger starts it."""

from __future__ import annotations

import subprocess
import sys

import pytest


@pytest.mark.parametrize("module", ["tenantry", "tenantry.cli"])
def test_the_command_runs_as_a_module(module: str) -> None:
    done = subprocess.run([sys.executable, "-m", module, "--help"], capture_output=True,
                          text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert "backup" in done.stdout and "migrate" in done.stdout
