"""A Postgres cluster a test owns: its own data directory and TCP port, so the test can crash
it (``pg_ctl stop -m immediate``), keep it down and start it again without touching the
shared server on 5432 that every other test uses.

Postgres refuses to run as root; as root the binaries run inside a user namespace where
they are ``nobody`` (as ``tenantry.db.embedded`` does), so nothing on the host changes.
Nothing here imports pytest: benchmarks and later failover tests use it as a plain module.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
from pathlib import Path
from types import TracebackType
from typing import Self
from urllib.parse import quote

BIN = Path("/usr/lib/postgresql/15/bin")
_NOBODY = 65534


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class PgCluster:
    """``initdb`` into ``root/data`` and serve on 127.0.0.1:``port``. With ``password``, the
    superuser ``postgres`` needs it (scram-sha-256 for TCP and socket); without, trust."""

    def __init__(self, root: Path, *, password: str | None = None, port: int | None = None,
                 max_connections: int = 200, bin_dir: Path = BIN,
                 settings: dict[str, str] | None = None) -> None:
        self.root = root
        self.pgdata = root / "data"
        self.log_file = root / "postgres.log"
        self.password = password
        self.port = port or free_port()
        self.max_connections = max_connections
        self.bin = bin_dir
        #: More ``-c name=value`` server settings (replication's, for a primary).
        self.settings = dict(settings or {})

    def __enter__(self) -> Self:
        self.init()
        self.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    def dsn(self, database: str = "postgres", *, password: str | None = None) -> str:
        """A URL for ``database``; ``password`` overrides the cluster's (to test a wrong one)."""
        secret = self.password if password is None else password
        auth = f"postgres:{quote(secret, safe='')}" if secret else "postgres"
        return f"postgresql://{auth}@127.0.0.1:{self.port}/{database}"

    def init(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        argv = [str(self.bin / "initdb"), "-D", str(self.pgdata), "-U", "postgres", "-E", "UTF8",
                "--locale=C", "--no-instructions", "--no-sync"]
        if self.password is not None:
            pwfile = self.root / "pwfile"
            pwfile.write_text(self.password + "\n")
            argv += ["-A", "scram-sha-256", f"--pwfile={pwfile}"]
        else:
            argv += ["-A", "trust"]
        self._run(argv)

    def start(self) -> None:
        # The socket lives in the data dir: /var/run/postgresql belongs to the shared server.
        options = (f"-c listen_addresses=127.0.0.1 -p {self.port} -k {self.pgdata} "
                   f"-c max_connections={self.max_connections} -c fsync=off")
        options += "".join(f" -c {name}={value}" for name, value in self.settings.items())
        self._run([str(self.bin / "pg_ctl"), "-D", str(self.pgdata), "-w", "-t", "60",
                   "-l", str(self.log_file), "-o", options, "start"])

    def crash(self) -> None:
        """Stop at once, as a crash would: no checkpoint, every connection cut; the next
        start runs crash recovery."""
        self._run([str(self.bin / "pg_ctl"), "-D", str(self.pgdata), "-w", "-m", "immediate",
                   "stop"])

    def standby(self, root: Path, name: str) -> PgCluster:
        """A streaming standby of this running cluster in ``root`` (``pg_basebackup -R``),
        not yet started. Its ``cluster_name`` is ``name``, which is what its WAL receiver
        calls itself to this primary: ``synchronous_standby_names='name'`` makes every
        commit here wait until that standby has flushed it."""
        replica = PgCluster(root, password=self.password, max_connections=self.max_connections,
                            bin_dir=self.bin, settings={"cluster_name": name})
        root.mkdir(parents=True, exist_ok=True)
        self._run([str(self.bin / "pg_basebackup"), "-D", str(replica.pgdata), "-R",
                   "-X", "stream", "-c", "fast", "-h", "127.0.0.1", "-p", str(self.port),
                   "-U", "postgres", "--no-sync"])
        return replica

    def promote(self) -> None:
        """A standby becomes a primary (``pg_ctl promote``, waiting until it takes writes)."""
        self._run([str(self.bin / "pg_ctl"), "-D", str(self.pgdata), "-w", "-t", "60",
                   "promote"])

    def kill(self) -> None:
        """SIGKILL the postmaster and every process it started, at once: the machine is gone
        (no shutdown, no last WAL sent; ``crash`` is a polite SIGQUIT by comparison)."""
        pid_file = self.pgdata / "postmaster.pid"
        postmaster = int(pid_file.read_text().split()[0])
        children = subprocess.run(["pgrep", "-P", str(postmaster)], capture_output=True,
                                  text=True, check=False).stdout.split()
        for pid in [postmaster, *map(int, children)]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        pid_file.unlink(missing_ok=True)  # no pg_ctl stop for a dead machine at teardown

    def stop(self) -> None:
        if (self.pgdata / "postmaster.pid").exists():
            self._run([str(self.bin / "pg_ctl"), "-D", str(self.pgdata), "-w", "-m", "fast",
                       "stop"])

    def _run(self, argv: list[str]) -> None:
        result = subprocess.run(as_cluster_owner(argv), capture_output=True, text=True,
                                check=False)
        if result.returncode != 0:
            log = self.log_file.read_text()[-2000:] if self.log_file.exists() else ""
            raise RuntimeError(f"{Path(argv[0]).name} failed ({result.returncode}): "
                               f"{result.stderr.strip()[-2000:]}\n{log}")


def as_cluster_owner(argv: list[str]) -> list[str]:
    """``argv`` as the user the test clusters run as: itself, or as root ``nobody`` in a user
    namespace. What must read or write a cluster's files (pgBackRest, a restore) runs so."""
    if os.geteuid() != 0:
        return argv
    unshare = shutil.which("unshare")
    if unshare is None:
        raise RuntimeError("running as root needs util-linux's 'unshare' to start Postgres")
    return [unshare, "--user", f"--map-user={_NOBODY}", f"--map-group={_NOBODY}", *argv]
