"""The embedded Postgres: used when no ``TENANTRY_DATABASE_URL`` is given, so one command
runs the whole platform.

Binaries come from the ``pgserver`` wheel (PostgreSQL 16, the ``[embedded]`` extra), else
from the system's ``/usr/lib/postgresql/*/bin``. We drive ``initdb``/``pg_ctl`` ourselves
instead of calling ``pgserver.get_server``: as root that function adds a system user and
opens every parent directory of the data dir to everyone. Postgres refuses to run as root,
so as root we start it inside a user namespace where it is ``nobody``; outside, its
processes and files stay the invoking user's, and nothing on the host is changed (see
docs/decisions/0001-storage.md).
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import subprocess
import tempfile
from importlib.util import find_spec
from pathlib import Path

from tenantry.db.roles import CONSOLE_LOGIN_ROLE, LOGIN_ROLE, with_user
from tenantry.errors import ConfigurationError

log = logging.getLogger(__name__)

_NOBODY = 65534
_SOCKET_PATH_MAX = 100  # sun_path is 108 bytes; leave room for ".s.PGSQL.5432"
PORT = 5432  # only names the socket file: the server listens on no TCP address


def find_binaries() -> Path:
    """Directory holding ``initdb``, ``pg_ctl`` and ``postgres``."""
    spec = find_spec("pgserver")
    if spec is not None and spec.submodule_search_locations:
        for location in spec.submodule_search_locations:
            candidate = Path(location) / "pginstall" / "bin"
            if (candidate / "pg_ctl").exists():
                return candidate
    system = sorted(
        Path("/usr/lib/postgresql").glob("*/bin"),
        key=lambda p: int(p.parent.name) if p.parent.name.isdigit() else 0,
    )
    for candidate in reversed(system):
        if (candidate / "pg_ctl").exists():
            return candidate
    raise ConfigurationError(
        "no PostgreSQL binaries for the embedded Postgres: install tenantry[embedded] (or "
        "Debian's postgresql) or set TENANTRY_DATABASE_URL"
    )


class EmbeddedPostgres:
    """A private Postgres cluster in ``<data_dir>/postgres``, reachable by unix socket only."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self.pgdata = data_dir / "postgres"
        self.bin = find_binaries()
        self._socket_dir: Path | None = None
        self._started_here = False

    # -- public -----------------------------------------------------------------------

    def start(self, *, create: bool = False) -> str:
        """Start (or reuse a running server), return its DSN; ``create``: initialise the
        cluster on first use (``up``, ``migrate``), else a data dir without one is refused
        before anything is made in it (a forgotten TENANTRY_DATA_DIR)."""
        if not (self.pgdata / "PG_VERSION").exists():
            if not create:
                raise ConfigurationError(
                    f"{self.data_dir} holds no Tenantry database (is TENANTRY_DATA_DIR "
                    "right? `tenantry up` or `tenantry migrate` makes one)")
            self.data_dir.mkdir(parents=True, exist_ok=True)
            self._initdb()
        running = self._running_socket_dir()
        if running is not None:
            log.info("embedded postgres already running", extra={"pgdata": str(self.pgdata)})
            self._socket_dir = running
        else:
            self._socket_dir = self._choose_socket_dir()
            self._start_server(self._socket_dir)
            self._started_here = True
        return self.dsn

    def restart(self) -> None:
        """Start the server this process started again, after it died: on the same socket
        directory, so every pool's DSN still reaches it."""
        if self._socket_dir is None or not self._started_here:
            raise RuntimeError("restart() is for a server this process started")
        self._start_server(self._socket_dir)

    def last_log_line(self) -> str:
        """The server's last word (why a start failed: pg_ctl only says to read the log)."""
        try:
            lines = (self.data_dir / "postgres.log").read_text(errors="replace").splitlines()
        except FileNotFoundError:
            return "no postgres.log"
        return next((line.strip() for line in reversed(lines) if line.strip()), "")

    def gone(self) -> str | None:
        """Why the server is not running (its pid file is missing, or names a process that
        is no more), or None while its postmaster lives. Cheap: no ``pg_ctl``, no
        connection — asked about once a second."""
        try:
            pid = int((self.pgdata / "postmaster.pid").read_text().split()[0])
        except FileNotFoundError:
            return "its postmaster.pid is gone"
        except (ValueError, IndexError):
            return "its postmaster.pid is unreadable"
        return None if _alive(pid) else f"postmaster pid {pid} is gone"

    def stop(self) -> None:
        if not (self.pgdata / "postmaster.pid").exists():
            return
        self._run([str(self.bin / "pg_ctl"), "-D", str(self.pgdata), "-w", "-m", "fast", "stop"])

    @property
    def started_here(self) -> bool:
        return self._started_here

    @property
    def dsn(self) -> str:
        """The superuser's: migrations and the operator's one-shot commands only."""
        if self._socket_dir is None:
            raise RuntimeError("embedded postgres is not started")
        return f"postgresql://postgres@/postgres?host={self._socket_dir}&port={PORT}"

    # The cluster trusts every login on its socket, which only its owner can open (mode
    # 0700, in the data dir): the processes log in as the roles migration 0015 makes, not
    # as the superuser, so a statement that leaves the pool's role has nothing to use.

    @property
    def app_dsn(self) -> str:
        """The API's and workers' login: owns nothing, may become tenantry_app."""
        return with_user(self.dsn, LOGIN_ROLE)

    @property
    def console_dsn(self) -> str:
        """The console pool's login: may become tenantry_console only."""
        return with_user(self.dsn, CONSOLE_LOGIN_ROLE)

    # -- internals --------------------------------------------------------------------

    def _initdb(self) -> None:
        tmp = self.data_dir / "postgres.initdb"
        shutil.rmtree(tmp, ignore_errors=True)
        # initdb into a side directory then rename: an interrupted initdb never leaves a
        # half-made cluster where the next start would trip over it.
        self._run(
            [
                str(self.bin / "initdb"), "-D", str(tmp), "-U", "postgres", "--auth=trust",
                "-E", "UTF8", "--locale=C", "--no-instructions",
            ]
        )
        tmp.rename(self.pgdata)

    def _running_socket_dir(self) -> Path | None:
        pid_file = self.pgdata / "postmaster.pid"
        if not pid_file.exists():
            return None
        status = subprocess.run(
            self._wrap([str(self.bin / "pg_ctl"), "-D", str(self.pgdata), "status"]),
            capture_output=True,
            check=False,
        )
        if status.returncode != 0:
            return None
        lines = pid_file.read_text().splitlines()
        # postmaster.pid line 5 is the socket directory (see PostgreSQL's pidfile.h).
        return Path(lines[4]) if len(lines) > 4 and lines[4] else None

    def _start_server(self, socket_dir: Path) -> None:
        # A crash can leave a stale pid file behind; pg_ctl handles that itself.
        options = (
            f"-c listen_addresses='' -k {socket_dir} -p {PORT} "
            "-c max_connections=300 -c unix_socket_permissions=0700"
        )
        self._run(
            [
                str(self.bin / "pg_ctl"), "-D", str(self.pgdata), "-w", "-t", "60",
                "-l", str(self.data_dir / "postgres.log"), "-o", options, "start",
            ]
        )

    def _choose_socket_dir(self) -> Path:
        if len(str(self.pgdata)) <= _SOCKET_PATH_MAX:
            return self.pgdata
        return Path(tempfile.mkdtemp(prefix="tenantry-pg-"))

    def _wrap(self, argv: list[str]) -> list[str]:
        if os.geteuid() != 0:
            return argv
        unshare = shutil.which("unshare")
        if unshare is None:
            raise ConfigurationError(
                "running as root needs util-linux's 'unshare' to start the embedded Postgres "
                "as an unprivileged user; install it or set TENANTRY_DATABASE_URL"
            )
        return [unshare, "--user", f"--map-user={_NOBODY}", f"--map-group={_NOBODY}", *argv]

    def _run(self, argv: list[str]) -> None:
        result = subprocess.run(self._wrap(argv), capture_output=True, text=True, check=False)
        if result.returncode != 0:
            tail = (result.stderr or result.stdout).strip()[-2000:]
            raise ConfigurationError(f"embedded postgres: {Path(argv[0]).name} failed: {tail}")


def _alive(pid: int) -> bool:
    """Whether ``pid`` is a live process. A zombie is not: when ``tenantry up`` is a
    container's init, a killed postmaster is a zombie of ours, reaped here (else the
    restarted server would take its pid file's pid for a live postmaster)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: alive
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:  # no /proc (or it just exited): the signal check has answered
        return True
    # The state follows the command name, which is in parentheses and may hold spaces.
    if stat.rpartition(")")[2].split()[:1] != ["Z"]:
        return True
    with contextlib.suppress(ChildProcessError):  # not ours: its parent reaps it
        os.waitpid(pid, os.WNOHANG)
    return False
