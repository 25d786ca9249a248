"""A release of Tenantry installed from git history: its source tree (``git archive``) and a
virtualenv of its own, so its processes run its code, not this checkout's
(tests/chaos/test_rolling_upgrade.py runs the previous release's API and workers).

Cached by commit under ``$XDG_CACHE_HOME/tenantry/releases/<sha>/`` (``~/.cache`` without
it): ``src-tree`` and ``venv``, and ``installed``, the stamp, written last — a build cut
short leaves no stamp and is built again from scratch. A file lock beside each makes a
second pytest process wait for the first one's build instead of racing it. The install is
pip's ordinary one (non-editable, its build isolation, the user's pip cache): a cold build
is the package index's time, a warm one is reading the stamp."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from tests.support.previous_release import REPOSITORY, git, release_of

#: Settings of this environment that would make the release's interpreter import this
#: checkout's code (a PYTHONPATH pointing at src/) or another environment's.
FOREIGN = ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "PYTHONSAFEPATH", "VIRTUAL_ENV")
STAMP = "installed"


def cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "tenantry" / "releases"


@dataclass(frozen=True, slots=True)
class InstalledRelease:
    ref: str  # as asked (a tag, or a commit)
    sha: str
    version: str  # its tenantry.__version__
    root: Path
    #: Seconds this call spent building it; None when it was cached already.
    built_seconds: float | None

    @property
    def venv(self) -> Path:
        return self.root / "venv"

    @property
    def python(self) -> Path:
        return self.venv / "bin" / "python"

    @property
    def tenantry(self) -> list[str]:
        """Its ``tenantry`` console script."""
        return [str(self.venv / "bin" / "tenantry")]

    def environ(self, env: Mapping[str, str]) -> dict[str, str]:
        """``env`` without what would point its interpreter elsewhere (:data:`FOREIGN`)."""
        return {k: v for k, v in env.items() if k not in FOREIGN}

    def run_python(self, code: str) -> str:
        """``code`` run by the release's interpreter (isolated: no user site, no
        PYTHONPATH); its stdout."""
        result = subprocess.run([str(self.python), "-I", "-c", code], capture_output=True,
                                text=True, env=self.environ(os.environ), check=False,
                                timeout=120)
        if result.returncode != 0:
            raise AssertionError(f"release {self.version} ({self.sha[:12]}) could not run "
                                 f"{code!r}:\n{result.stderr[-2000:]}")
        return result.stdout


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)  # released when the file closes
        yield


def installed(ref: str, *, cache: Path | None = None) -> InstalledRelease:
    """The release at ``ref`` with its own virtualenv, built unless cached."""
    sha = git("rev-parse", f"{ref}^{{commit}}").strip()
    version = release_of(sha)
    root = (cache or cache_root()) / sha
    with _locked(root.parent / f"{sha}.lock"):
        stamp = root / STAMP
        if stamp.is_file():
            return InstalledRelease(ref, sha, version, root, None)
        started = time.monotonic()
        _build(sha, root)
        seconds = time.monotonic() - started
        release = InstalledRelease(ref, sha, version, root, seconds)
        found = release.run_python(
            "import tenantry; print(tenantry.__version__); print(tenantry.__file__)").split()
        if found[0] != version or not found[1].startswith(str(release.venv)):
            raise AssertionError(f"the virtualenv of {sha[:12]} imports tenantry {found}, "
                                 f"not its own {version}")
        stamp.write_text(json.dumps({"ref": ref, "sha": sha, "version": version,
                                     "seconds": round(seconds, 1)}) + "\n")
        return release


def _build(sha: str, root: Path) -> None:
    """The tree at ``sha`` and a virtualenv with it installed, from nothing."""
    shutil.rmtree(root, ignore_errors=True)
    tree, venv = root / "src-tree", root / "venv"
    tree.mkdir(parents=True)
    archive = subprocess.Popen(["git", "-C", str(REPOSITORY), "archive", "--format=tar", sha],
                               stdout=subprocess.PIPE)
    assert archive.stdout is not None
    untar = subprocess.run(["tar", "-x", "-C", str(tree)], stdin=archive.stdout,
                           capture_output=True, check=False)
    archive.stdout.close()
    if archive.wait() != 0 or untar.returncode != 0:
        raise AssertionError(f"git archive {sha[:12]} | tar -x failed: "
                             f"{untar.stderr.decode(errors='replace')[-1000:]}")
    # No pip inside it: this environment's pip installs into it (--python), which saves
    # copying pip into every cached release.
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], "python -m venv")
    pip = [sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install",
           "--quiet", "--disable-pip-version-check"]
    # From 0.2.0 a release is two distributions (ADR 0038) installed from its lock: the
    # server requires its own tenantry-client, which only its tree has.
    client = tree / "clients" / "python"
    if (tree / "requirements.lock").exists():
        _run([*pip, "--require-hashes", "-r", str(tree / "requirements.lock")],
             "pip install -r requirements.lock")
        pip.append("--no-deps")
    _run([*pip, *([str(client)] if client.exists() else []), str(tree)], "pip install")


def _run(argv: list[str], what: str) -> None:
    result = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=900,
                            env={k: v for k, v in os.environ.items() if k not in FOREIGN})
    if result.returncode != 0:
        raise AssertionError(f"{what} failed ({result.returncode}):\n"
                             f"{(result.stdout + result.stderr)[-3000:]}")
