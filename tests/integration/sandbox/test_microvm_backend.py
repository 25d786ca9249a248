"""The microvm backend on this host: the guest image built from Debian packages, a template
booted once (software emulation here: /dev/kvm is PVM), clones restored from it. Real QEMU
processes; needs root (cgroups, setpriv). Never skipped: a missing QEMU fails with the
package to install."""

from __future__ import annotations

import os
import shutil
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tenantry.sandbox.backends.cgroups import PARENT, ROOT
from tenantry.sandbox.backends.microvm import MicroVmBackend, MicroVmInstance
from tenantry.sandbox.backends.microvm_host import QEMU_BINARY, QEMU_PACKAGE
from tenantry.sandbox.backends.uids import HOST_UID_BASE
from tenantry.sandbox.image.build import ImageInfo, build_image, find_image
from tenantry.sandbox.types import Limits
from tests.support.sandbox import sandbox_settings

# The first test pays for the image build and the template boot (emulated: tens of seconds
# on a busy 2-core host); the suite-wide 120 s guard would be too tight for it.
pytestmark = pytest.mark.timeout(600)

LIMITS = Limits(memory_mib=256, pids=64, disk_mib=64, timeout_s=20)


@pytest.fixture(scope="session")
def image_cache() -> Path:
    """Where `make test` builds the image (TENANTRY_SANDBOX_IMAGE_DIR overrides): once per
    machine, then a no-op."""
    if shutil.which(QEMU_BINARY) is None:
        pytest.fail(f"microvm tests need {QEMU_BINARY}: install the Debian package "
                    f"{QEMU_PACKAGE} (scripts/install-system-packages does)")
    return sandbox_settings(Path("/nonexistent"), "microvm").sandbox_dir


@pytest.fixture(scope="session")
def microvm_image(image_cache: Path) -> ImageInfo:
    return build_image(image_cache)


@pytest.fixture(scope="session")
async def backend(microvm_image: ImageInfo, image_cache: Path
                  ) -> AsyncIterator[MicroVmBackend]:
    # Templates persist next to the image, so later sessions restore without booting.
    backend = MicroVmBackend(microvm_image, image_cache / "test-state",
                             memory_mib=LIMITS.memory_mib)
    try:
        yield backend
    finally:
        await backend.close()


def running(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"


def proc_text(pid: int, name: str) -> str:
    return Path(f"/proc/{pid}/{name}").read_text()


def proc_bytes(pid: int, name: str) -> bytes:
    return Path(f"/proc/{pid}/{name}").read_bytes()


async def run(instance: MicroVmInstance, code: str) -> dict[str, object]:
    return await instance.channel.request("exec", python=code, timeout_s=30, timeout=90)


def test_image_build_is_reproducible(image_cache: Path, microvm_image: ImageInfo,
                                     tmp_path: Path) -> None:
    builds = []
    for name in ("a", "b"):
        cache = tmp_path / name
        cache.mkdir()
        (cache / "debs").symlink_to(image_cache / "debs")  # the downloads, not the image
        builds.append(build_image(cache))
    first, second = builds
    assert first.digest == second.digest == microvm_image.digest
    assert first.initramfs.read_bytes() == second.initramfs.read_bytes()
    assert first.kernel.read_bytes()[:4] == b"\x7fELF"  # the uncompressed kernel (PVH)

    # Present → a no-op that finds the same image; find_image reads it without building.
    again = build_image(tmp_path / "a")
    assert again == first and again.initramfs.stat().st_mtime == first.initramfs.stat().st_mtime
    assert find_image(tmp_path / "a") == first
    assert find_image(tmp_path / "empty") is None


async def test_clone_launches_from_template_and_runs_code(backend: MicroVmBackend) -> None:
    instance = await backend.launch(LIMITS)
    try:
        assert instance.alive
        assert (await instance.channel.request("ping"))["ok"] is True
        reply = await run(instance, "import os; print(os.getuid(), 6 * 7)")
        assert reply["exit_code"] == 0 and reply["stdout"] == "1000 42\n"
        # QEMU itself is confined: unprivileged, seccomp-filtered, in its own cgroups.
        status = proc_text(instance.pid, "status")
        assert instance.host_uid is not None and instance.host_uid >= HOST_UID_BASE
        assert f"Uid:\t{instance.host_uid}\t" in status and "Seccomp:\t2" in status
        assert "CapEff:\t0000000000000000" in status
        assert f"{PARENT}/microvm-{instance.id}" in proc_text(instance.pid, "cgroup")
        # ... and in a network namespace of its own, not the host's.
        assert os.readlink(f"/proc/{instance.pid}/ns/net") != os.readlink("/proc/self/ns/net")
        assert (instance.pss_kib() or 0) > 0
    finally:
        await instance.destroy()


#: What a worker's environment holds (config.py reads them from there).
PLATFORM_SECRETS = {
    "TENANTRY_MASTER_KEY": "master-key-3b8f0c2e9d",
    "TENANTRY_OPERATOR_TOKEN": "operator-token-5a1d7e",
    "TENANTRY_MODEL_API_KEY": "model-api-key-c4e9f1",
    "TENANTRY_DATABASE_URL": "postgresql://tenantry:db-password-77e2@127.0.0.1/tenantry",
}


async def test_qemu_holds_none_of_the_workers_secrets_and_each_vm_its_own_uid(
    backend: MicroVmBackend, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The attack: a guest that escapes into its QEMU reads QEMU's environment (there,
    the worker's would be the platform's keys) and signals or ptraces its neighbour VMs
    (there, all of them under one uid)."""
    for name, value in PLATFORM_SECRETS.items():
        monkeypatch.setenv(name, value)
    first = await backend.launch(LIMITS)
    second = await backend.launch(LIMITS)
    try:
        for instance in (first, second):
            assert "qemu-system" in os.readlink(f"/proc/{instance.pid}/exe")
            environ = proc_bytes(instance.pid, "environ")
            leaked = [name for name, value in PLATFORM_SECRETS.items()
                      if name.encode() in environ or value.encode() in environ]
            assert leaked == [], environ
            assert b"TENANTRY_" not in environ
        uids = [proc_text(i.pid, "status").split("Uid:\t")[1].split()[0]
                for i in (first, second)]
        assert uids[0] != uids[1] and "0" not in uids, uids
    finally:
        await first.destroy()
        await second.destroy()


async def test_pause_stops_the_guest_and_resume_continues_it(backend: MicroVmBackend) -> None:
    instance = await backend.launch(LIMITS)
    try:
        await run(instance, "open('/work/kept', 'w').write('before pause')")
        await instance.pause()
        assert await instance.status() == "paused"
        await instance.resume()
        assert await instance.status() == "running"
        reply = await run(instance, "print(open('/work/kept').read())")
        assert reply["stdout"] == "before pause\n"
    finally:
        await instance.destroy()


async def test_destroy_removes_process_and_host_files(backend: MicroVmBackend) -> None:
    instance = await backend.launch(LIMITS)
    cgroups = [ROOT / c / PARENT / f"microvm-{instance.id}" for c in ("memory", "cpu", "pids")]
    assert running(instance.pid) and instance.directory.is_dir()
    assert all(d.is_dir() for d in cgroups)

    await instance.destroy()
    assert not instance.alive and not running(instance.pid)
    assert not instance.directory.exists()
    assert not any(d.exists() for d in cgroups)
    await instance.destroy()  # idempotent


async def test_two_clones_are_separate_machines(backend: MicroVmBackend) -> None:
    first = await backend.launch(LIMITS)
    second = await backend.launch(LIMITS)
    try:
        assert first.pid != second.pid and first.id != second.id
        await run(first, "open('/work/mine', 'w').write('first')")
        reply = await run(second, "import os; print(os.path.exists('/work/mine'))")
        assert reply["stdout"] == "False\n"
        await second.destroy()
        assert first.alive  # one clone's end is not the other's
        assert (await run(first, "print(open('/work/mine').read())"))["stdout"] == "first\n"
    finally:
        await first.destroy()
        await second.destroy()


async def test_template_is_reused_by_a_new_backend(microvm_image: ImageInfo,
                                                   image_cache: Path) -> None:
    """Another process (here: another backend object) restores from the template on disk
    instead of booting its own."""
    state = image_cache / "test-state"
    other = MicroVmBackend(microvm_image, state, memory_mib=LIMITS.memory_mib)
    try:
        await other.prepare(LIMITS)
        templates = sorted(p for p in (state / "templates").iterdir() if p.is_dir())
        before = {p: os.stat(p / "state").st_ino for p in templates}
        instance = await other.launch(LIMITS)
        await instance.destroy()
        after = {p: os.stat(p / "state").st_ino for p in templates}
        assert before == after and templates
    finally:
        await other.close()
