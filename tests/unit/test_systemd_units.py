"""The systemd units of deploy/systemd/ hold up: `systemd-analyze verify` accepts them with
no warning (every key known, every value parsed, the program executable), and each one
starts a command `tenantry` has. systemd-analyze comes with systemd, which Debian always
has: without it this test fails, it is never skipped.

The units name the installed program (/opt/tenantry/bin/tenantry) and /etc/tenantry/ env
files; the copies verified here name this checkout's `tenantry` and the example env files
instead, the only difference."""

from __future__ import annotations

import configparser
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
UNITS = ROOT / "deploy" / "systemd"
INSTALLED = "/opt/tenantry/bin/tenantry"
TENANTRY = Path(sys.executable).parent / "tenantry"


def _unit(name: str) -> configparser.ConfigParser:
    # Repeated keys (EnvironmentFile) are legal in units: keep the last, as strict=False.
    parser = configparser.ConfigParser(strict=False, interpolation=None)
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read(UNITS / name)
    return parser


def _here(tmp_path: Path) -> list[Path]:
    """The units with this checkout's program and the example env files; the template
    as one instance."""
    for example in ("tenantry.env", "migrate.env"):
        shutil.copy(UNITS / f"{example}.example", tmp_path / example)
    out = []
    for unit in sorted(UNITS.glob("*.service")):
        text = unit.read_text().replace(INSTALLED, str(TENANTRY))
        text = text.replace("/etc/tenantry/", f"{tmp_path}/")
        name = unit.name.replace("@.", "@1.")
        (tmp_path / name).write_text(text)
        out.append(tmp_path / name)
    return out


def test_systemd_analyze_verifies_the_units_without_a_warning(tmp_path: Path) -> None:
    analyze = shutil.which("systemd-analyze")
    assert analyze, "no systemd-analyze: apt-get install systemd"
    units = _here(tmp_path)
    assert [u.name for u in units] == [
        "tenantry-api.service", "tenantry-migrate.service", "tenantry-worker@1.service"]
    done = subprocess.run([analyze, "verify", "--man=no", *map(str, units)],
                          capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stderr.strip() == "", done.stderr


@pytest.mark.parametrize(("unit", "command"), [
    ("tenantry-migrate.service", "migrate"), ("tenantry-api.service", "api"),
    ("tenantry-worker@.service", "worker")])
def test_each_unit_starts_a_tenantry_command_that_exists(unit: str, command: str) -> None:
    argv = shlex.split(_unit(unit)["Service"]["ExecStart"])
    assert argv[:2] == [INSTALLED, command]
    done = subprocess.run([str(TENANTRY), *argv[1:], "--help"], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr


def test_migrations_run_once_before_the_api_and_the_workers() -> None:
    migrate = _unit("tenantry-migrate.service")["Service"]
    assert migrate["Type"] == "oneshot" and migrate["RemainAfterExit"] == "yes"
    for name in ("tenantry-api.service", "tenantry-worker@.service"):
        unit = _unit(name)["Unit"]
        assert "tenantry-migrate.service" in unit["Requires"].split()
        assert "tenantry-migrate.service" in unit["After"].split()
