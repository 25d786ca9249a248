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
import time
from pathlib import Path
from types import TracebackType
from typing import Self

import asyncpg

from tests.support.pgcluster import PgCluster

PRIMARY, STANDBY = "node1", "node2"


class PgCell:
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

    def lose_primary(self) -> None:
        """The primary's machine is gone: Postgres and every backend SIGKILLed at once."""
        self.primary.kill()

    def promote(self) -> None:
        assert self.standby is not None
        self.standby.promote()
        self.promoted = True
