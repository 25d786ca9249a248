"""A highly available cell's database as the failover tests and ``benchmarks/failover.py``
drive it without a failover manager: a primary and one synchronous standby
(``pg_basebackup -R``), the multi-host URL Tenantry is given, and a failover done by hand —
the primary's machine dies (every process SIGKILLed), then the standby is promoted
(``pg_ctl promote``), which is what Patroni does once the leader key expires
(docs/how-to/ha-cell.md; ``scripts/patroni-cell`` runs the same topology under Patroni).

Synchronous: the primary's ``synchronous_standby_names`` names the standby, so Postgres
acknowledges a commit only once the standby has it; after the promotion the new primary has
no standby and waits for none. No pytest here."""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
from pathlib import Path
from types import TracebackType
from typing import Self

import asyncpg

from tenantry.db.dsn import for_cluster
from tests.support.pgcluster import PgCluster

PRIMARY, STANDBY = "node1", "node2"
PATRONI_CELL = Path(__file__).resolve().parents[2] / "scripts" / "patroni-cell"


class PgCell:
    """Failed over by hand: :meth:`lose_primary`, then :meth:`promote` when the caller says."""

    manager = "pg_ctl"

    def __init__(self, root: Path, *, max_connections: int = 200) -> None:
        self.root = root
        self.primary = PgCluster(root / PRIMARY, max_connections=max_connections, settings={
            "cluster_name": PRIMARY, "synchronous_standby_names": STANDBY,
            "synchronous_commit": "on"})
        self.standby: PgCluster | None = None
        self.promoted = False

    def __enter__(self) -> Self:
        self.primary.init()
        self.primary.start()
        self.standby = self.primary.standby(self.root / STANDBY, STANDBY)
        self.standby.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        for node in (self.standby, self.primary):
            if node is not None:
                node.stop()

    def url(self, database: str = "postgres") -> str:
        """Both nodes, primary first; Tenantry adds ``target_session_attrs=read-write``."""
        assert self.standby is not None
        return (f"postgresql://postgres@127.0.0.1:{self.primary.port},"
                f"127.0.0.1:{self.standby.port}/{database}")

    async def wait_synchronous(self, within: float = 60.0) -> None:
        """Until the primary reports the standby streaming as its synchronous standby: from
        then on every acknowledged commit is on both."""
        conn = await asyncpg.connect(self.primary.dsn())
        try:
            deadline = time.monotonic() + within
            while await conn.fetchval(
                    "SELECT count(*) FROM pg_stat_replication WHERE application_name = $1 "
                    "AND state = 'streaming' AND sync_state = 'sync'", STANDBY) != 1:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{STANDBY} never became the synchronous standby")
                await asyncio.sleep(0.1)  # the walsender reports its state; nothing to await
        finally:
            await conn.close()

    def node_dsn(self, node: str) -> str:
        return (self.primary if node == PRIMARY else self._standby()).dsn()

    @property
    def standby_port(self) -> int:
        return self._standby().port

    def _standby(self) -> PgCluster:
        assert self.standby is not None, "the cell is not started"
        return self.standby

    async def lose_primary(self) -> None:
        """The primary's machine is gone: Postgres and every backend SIGKILLed at once."""
        self.primary.kill()

    def promote(self) -> None:
        assert self.standby is not None
        self.standby.promote()
        self.promoted = True


class PatroniCell:
    """The same two nodes under Patroni and etcd (``scripts/patroni-cell``): the standby is
    promoted by Patroni once the dead leader's key expires (ttl 10 s); nobody calls promote."""

    manager = "patroni"

    def __init__(self, root: Path) -> None:
        self.root = root
        self.ports: dict[str, int] = {}

    def __enter__(self) -> Self:
        started = subprocess.run([str(PATRONI_CELL), "start", str(self.root)],
                                 capture_output=True, text=True, check=False)
        if started.returncode != 0:
            raise RuntimeError(f"patroni-cell start failed: {started.stderr.strip()}")
        self.ports = json.loads((self.root / "ports.json").read_text())
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        subprocess.run([str(PATRONI_CELL), "stop", str(self.root)], check=False)

    def url(self) -> str:
        return (f"postgresql://postgres@127.0.0.1:{self.ports[PRIMARY]},"
                f"127.0.0.1:{self.ports[STANDBY]}/postgres")

    def node_dsn(self, node: str) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.ports[node]}/postgres"

    @property
    def standby_port(self) -> int:
        return self.ports[STANDBY]

    async def wait_synchronous(self) -> None:
        """``patroni-cell start`` returns once the standby is synchronous."""

    async def lose_primary(self) -> None:
        killer = await asyncio.create_subprocess_exec(str(PATRONI_CELL), "kill",
                                                      str(self.root), PRIMARY)
        if await killer.wait() != 0:
            raise RuntimeError("patroni-cell kill failed")


async def connect_to_primary(url: str, within: float = 120.0) -> asyncpg.Connection:
    """A connection to whichever node of ``url`` is the writable primary, once there is one
    (during a failover there is none for a while)."""
    deadline = time.monotonic() + within
    while True:
        try:
            return await asyncpg.connect(for_cluster(url), timeout=10)
        except (OSError, asyncpg.PostgresError, asyncpg.exceptions.InternalClientError):
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.1)  # no host is the primary yet; nothing to await
