"""The ``microvm`` backend: each sandbox is its own guest kernel under QEMU's
``microvm`` machine — KVM where the host has hardware virtualization, software emulation
(TCG) otherwise.

Fast start comes from a template: one VM is booted per (image, RAM size, disk, pids, QEMU
version, accelerator), its RAM in a shared file; once its agent is up, its device state is
migrated to a small file with ``x-ignore-shared`` (RAM is not copied). Both files are kept
under ``state_dir`` for later processes. A clone maps that RAM privately (copy-on-write) and
loads the device state: it answers in a fraction of a boot.

QEMU is confined: no network device (the guest's only way out is its egress relay's
virtio-serial port, a byte stream to the host's ``EgressProxy``), its own seccomp filter
(``-sandbox``), an unprivileged uid, cgroup limits. It opens no path of ours: every file
and socket is handed to it as an open descriptor (``/proc/self/fd/N``, ``fd=N``), so the
unprivileged uid needs no access to our directories. Clones read the template's RAM from a
sealed memfd: they can copy-on-write it, never change it for their siblings.

QEMU starts with an environment of its own (``QEMU_ENV``), never the worker's: the worker's
holds the platform's secrets (master key, operator token, model keys, database URL), and a
guest that escaped into QEMU would read them from its own environment. Each VM runs as
its own host uid, leased host-wide (``uids``), so two VMs (of one worker or two) cannot
signal or ptrace each other. Every VM is in the host-wide registry (``registry``): its
worker's guardian kills it if the worker dies, beside QEMU's own parent-death signal."""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import shutil
import signal
import socket
from dataclasses import dataclass
from pathlib import Path

from tenantry.sandbox.backends.cgroups import CgroupV1, remove_stale
from tenantry.sandbox.backends.child import HOST_PATH
from tenantry.sandbox.backends.microvm_host import (
    QEMU_PACKAGE,
    TemplateFiles,
    host_tsc_khz,
    kvm_usable,
    prune_templates,
    qemu_binary,
    qemu_version,
    sealed_copy,
    template_lock,
)
from tenantry.sandbox.backends.microvm_instance import MicroVmInstance
from tenantry.sandbox.backends.orphans import process_dir, reap_dead, release_process_dir
from tenantry.sandbox.backends.qmp import QmpClient, QmpError
from tenantry.sandbox.backends.registry import Backstop
from tenantry.sandbox.backends.uids import UidAllocator, UidLease
from tenantry.sandbox.channel import MAX_LINE_BYTES, AgentChannel
from tenantry.sandbox.egress.port import EgressPort
from tenantry.sandbox.image.build import ImageInfo
from tenantry.sandbox.types import Limits, SandboxLost, SandboxUnavailable

__all__ = ["QEMU_PACKAGE", "MicroVmBackend", "MicroVmInstance", "kvm_usable"]

#: All QEMU (and unshare, setpriv) get of an environment: nothing of the worker's.
QEMU_ENV = {"PATH": HOST_PATH, "LANG": "C.UTF-8"}
#: Host memory QEMU needs beyond guest RAM (its own heap, the bounded TCG code cache):
#: the cgroup sits above the guest's RAM, so a memory bomb meets the *guest's* OOM killer.
QEMU_OVERHEAD_MIB = 160
TCG_CACHE_MIB = 64
#: The guest's /tmp unless told otherwise (init.sh's own default too).
DEFAULT_TMP_MIB = 64
#: QEMU's threads count against pids.max (vCPU, RCU, its I/O worker pool).
QEMU_MAX_TASKS = 256
BOOT_TIMEOUT_S = 180.0  # a cold boot under emulation on a loaded 2-core host
RESTORE_TIMEOUT_S = 60.0
QMP_TIMEOUT_S = 30.0
AGENT_PORT = "tenantry.agent"
#: The guest's egress relay opens this port by name (``relay.py --port-name``).
EGRESS_PORT = "tenantry.egress"
SECCOMP = "on,obsolete=deny,elevateprivileges=deny,spawn=deny,resourcecontrol=deny"
IGNORE_SHARED = [{"capability": "x-ignore-shared", "state": True}]


def _debug() -> bool:
    return os.environ.get("TENANTRY_SANDBOX_DEBUG", "") not in ("", "0")


@dataclass(slots=True)
class _Launch:
    """What one QEMU process is started with: its extra arguments and the descriptors it
    inherits (closed in the parent once QEMU has them)."""

    args: list[str]
    inherit: list[int]  # the caller keeps (and closes) these
    owned: list[int]  # closed here once QEMU has them


class MicroVmBackend:
    name = "microvm"

    def __init__(self, image: ImageInfo, state_dir: Path, *, accel: str | None = None,
                 memory_mib: int = 256, tmp_mib: int = DEFAULT_TMP_MIB,
                 uids: UidAllocator | None = None) -> None:
        self.image = image
        self.state_dir = state_dir
        self.accel = accel or ("kvm" if kvm_usable() else "tcg")
        self.memory_mib = memory_mib
        self.tmp_mib = tmp_mib  # the guest's /tmp (init.sh's tenantry.tmp_mib)
        # Each image variant keeps its templates apart: pruning the templates of a
        # variant's older images must not delete the other variant's.
        variant = str(image.manifest.get("variant", "code"))
        self._template_root = state_dir / ("templates" if variant == "code"
                                           else f"templates-{variant}")
        self._qemu = qemu_binary()
        self._version = qemu_version(self._qemu)
        self._tsc_khz = host_tsc_khz()
        self._templates: dict[str, TemplateFiles] = {}
        self._rams: dict[str, int] = {}  # template key → sealed memfd of its RAM
        self._template_locks: dict[str, asyncio.Lock] = {}
        self._instances: dict[str, MicroVmInstance] = {}
        # Per worker process (QEMU dies with its worker; its folder is removed by the
        # next backend to start on this host).
        reap_dead(state_dir / "instances")
        self.process_dir = process_dir(state_dir / "instances")
        if os.geteuid() == 0 and CgroupV1.available():
            remove_stale("microvm-")  # left by killed workers (their VMs died with them)
        self._uids = (uids or UidAllocator()) if os.geteuid() == 0 else None
        self._leases: dict[str, UidLease] = {}
        self.backstop = Backstop(self.name)

    # -- public ------------------------------------------------------------------------

    async def prepare(self, limits: Limits | None = None) -> None:
        """Make sure the template for ``limits`` (default: this backend's RAM size) exists,
        booting it if no process built it before."""
        await self._template(limits or Limits(memory_mib=self.memory_mib))

    async def launch(self, limits: Limits) -> MicroVmInstance:
        """A clone of the template for ``limits`` (RAM, disk, pids are fixed at boot, so
        each combination has its own template), running and answering."""
        template = await self._template(limits)
        ram = self._rams[template.key]
        state = os.open(template.state, os.O_RDONLY | os.O_CLOEXEC)
        ram_arg = self._ram_object(ram, limits.memory_mib, share=False)
        # x-ignore-shared must be on before the stream is read, and QEMU 7.2 has no
        # command-line switch for it: defer the incoming migration until it is set.
        launch = _Launch([*ram_arg, "-S", "-incoming", "defer"], [ram, state], [])
        try:
            instance = await self._start(limits, launch, fresh_boot=False)
        finally:
            os.close(state)
        try:
            qmp = instance._qmp
            await qmp.execute("migrate-set-capabilities", capabilities=IGNORE_SHARED)
            await qmp.execute("migrate-incoming", uri=f"fd:{state}")
            await instance._monitor("cont")
            await instance.channel.request("ping", timeout=RESTORE_TIMEOUT_S)
        except BaseException:
            await instance.destroy()
            raise
        return instance

    async def cold_boot(self, limits: Limits) -> MicroVmInstance:
        """Boot from the kernel, no template (for benchmarks and debugging)."""
        launch = _Launch(["-m", f"{limits.memory_mib}M"], [], [])
        instance = await self._start(limits, launch, fresh_boot=True)
        try:
            await instance.channel.request("ping", timeout=RESTORE_TIMEOUT_S)
        except BaseException:
            await instance.destroy()
            raise
        return instance

    async def close(self) -> None:
        await asyncio.gather(*(i.destroy() for i in list(self._instances.values())),
                             return_exceptions=True)
        self._instances.clear()
        self.backstop.close()
        for fd in self._rams.values():
            with contextlib.suppress(OSError):
                os.close(fd)
        self._rams.clear()
        release_process_dir(self.process_dir)  # the last of this process's backends

    # -- template ----------------------------------------------------------------------

    def _template_key(self, limits: Limits) -> str:
        return "-".join((self.image.digest[:16], f"m{limits.memory_mib}", f"d{limits.disk_mib}",
                         f"t{self.tmp_mib}", f"p{limits.pids}", f"q{self._version}",
                         self.accel))

    async def _template(self, limits: Limits) -> TemplateFiles:
        key = self._template_key(limits)
        lock = self._template_locks.setdefault(key, asyncio.Lock())
        async with lock:
            template = self._templates.get(key)
            if template is None:
                files = TemplateFiles.at(self._template_root, key)
                async with template_lock(files.lock):
                    if not files.complete():
                        await self._boot_template(limits, files)
                        await asyncio.to_thread(prune_templates, files.directory.parent,
                                                self.image.digest[:16])
                self._rams[key] = await asyncio.to_thread(sealed_copy, files.ram,
                                                          limits.memory_mib << 20)
                template = self._templates[key] = files
        return template

    async def _boot_template(self, limits: Limits, files: TemplateFiles) -> None:
        files.directory.mkdir(parents=True, exist_ok=True)
        ram = os.memfd_create(f"tenantry-template-{files.key}", os.MFD_CLOEXEC)
        try:
            os.ftruncate(ram, limits.memory_mib << 20)
            launch = _Launch(self._ram_object(ram, limits.memory_mib, share=True), [ram], [])
            instance = await self._start(limits, launch, fresh_boot=True)
            try:
                await instance.channel.request("ping", timeout=RESTORE_TIMEOUT_S)
                await self._save_state(instance, files)
            finally:
                await instance.destroy()
            await asyncio.to_thread(files.write_ram, ram)
        finally:
            os.close(ram)

    async def _save_state(self, instance: MicroVmInstance, files: TemplateFiles) -> None:
        # A running guest is migrated as is (a stopped one would restore stopped); with
        # x-ignore-shared its RAM, already in the shared file, is not copied.
        qmp = instance._qmp
        await qmp.execute("migrate-set-capabilities", capabilities=IGNORE_SHARED)
        partial = files.state.with_suffix(".partial")
        fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
        try:
            await qmp.execute_with_fd("getfd", fd, fdname="state")
        finally:
            os.close(fd)
        await qmp.execute("migrate", uri="fd:state")
        async with asyncio.timeout(RESTORE_TIMEOUT_S):
            while True:
                status = (await qmp.execute("query-migrate")).get("status")
                if status == "completed":
                    break
                if status in ("failed", "cancelled"):
                    raise SandboxUnavailable(f"saving the microvm template failed: {status}")
                await asyncio.sleep(0.01)
        partial.replace(files.state)

    # -- processes ---------------------------------------------------------------------

    def _ram_object(self, fd: int, memory_mib: int, *, share: bool) -> list[str]:
        return ["-m", f"{memory_mib}M", "-object",
                f"memory-backend-file,id=ram,mem-path=/proc/self/fd/{fd},size={memory_mib}M,"
                f"share={'on' if share else 'off'}"]

    def _machine_args(self, *, memory_backend: bool) -> list[str]:
        machine = "microvm,pit=on,pic=on,rtc=on,isa-serial=on"
        if memory_backend:
            machine += ",memory-backend=ram"
        accel = "kvm" if self.accel == "kvm" else f"tcg,tb-size={TCG_CACHE_MIB}"
        cpu = ["-cpu", "host"] if self.accel == "kvm" else []
        return ["-M", machine, "-accel", accel, *cpu, "-smp", "1", "-nodefaults",
                "-no-user-config", "-display", "none", "-net", "none", "-no-reboot",
                "-sandbox", SECCOMP]

    def _kernel_cmdline(self, limits: Limits) -> str:
        args = [f"tsc_early_khz={self._tsc_khz}", "tsc=reliable", "panic=-1", "reboot=t",
                "rdinit=/init", f"tenantry.disk_mib={limits.disk_mib}",
                f"tenantry.tmp_mib={self.tmp_mib}", f"tenantry.pids={limits.pids}"]
        if _debug():
            args += ["console=ttyS0", "tenantry.debug=1"]
        else:
            args += ["quiet", "loglevel=1"]
        return " ".join(args)

    async def _start(self, limits: Limits, launch: _Launch, *,
                     fresh_boot: bool) -> MicroVmInstance:
        """Spawn QEMU (cgroup → unprivileged uid → seccomp) with its monitor, the agent's
        port and the egress relay's port on socketpairs, and connect to the first two (the
        egress port is read only once the instance is bound: ``attach_egress``). Every
        instance has its own pairs, a clone too: the template's never carry over. A fresh
        boot also waits for the agent's hello; a restore leaves that to the caller (its
        agent said hello in the template)."""
        instance_id = "vm_" + secrets.token_hex(8)
        directory = self.process_dir / instance_id
        directory.mkdir(parents=True)
        host_qmp, guest_qmp = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        host_agent, guest_agent = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        host_egress, guest_egress = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        owned = list(launch.owned)
        cgroup: CgroupV1 | None = None
        lease: UidLease | None = None
        try:
            # QEMU's stdout/stderr: its errors, and the guest console when debugging.
            console = os.open(directory / "console.log",
                              os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o600)
            owned.append(console)
            args = [
                *self._machine_args(memory_backend=any("memory-backend" in a
                                                       for a in launch.args)),
                *launch.args,
                "-chardev", f"socket,id=qmp,fd={guest_qmp.fileno()}",
                "-mon", "chardev=qmp,mode=control",
                # Port 0 is the console's: the agent's and the relay's ports come after it.
                "-device", "virtio-serial-device,max_ports=3",
                "-chardev", f"socket,id=agent,fd={guest_agent.fileno()}",
                "-device", f"virtserialport,chardev=agent,name={AGENT_PORT}",
                "-chardev", f"socket,id=egress,fd={guest_egress.fileno()}",
                "-device", f"virtserialport,chardev=egress,name={EGRESS_PORT}",
                "-serial", "stdio" if _debug() else "none",
            ]
            if fresh_boot:
                boot_fds = [os.open(self.image.kernel, os.O_RDONLY | os.O_CLOEXEC),
                            os.open(self.image.initramfs, os.O_RDONLY | os.O_CLOEXEC)]
                owned += boot_fds
                args += ["-kernel", f"/proc/self/fd/{boot_fds[0]}",
                         "-initrd", f"/proc/self/fd/{boot_fds[1]}",
                         "-append", self._kernel_cmdline(limits)]
            argv = [self._qemu, *args]
            if self._uids is not None:
                # In a network namespace of its own (only a down loopback: a compromised
                # QEMU has no network to reach either), as a uid of its own, no
                # capabilities, and killed if its worker dies.
                lease = self._uids.lease()
                argv = ["unshare", "--net", "--", "setpriv", f"--reuid={lease.uid}",
                        f"--regid={lease.uid}", "--clear-groups", "--inh-caps=-all",
                        "--bounding-set=-all", "--pdeathsig=KILL", "--", *argv]
            else:  # not root: no uid to change, still killed with its worker
                argv = ["setpriv", "--pdeathsig=KILL", "--", *argv]
            cgroup = self._cgroup(instance_id, limits)
            if cgroup is not None:
                argv = cgroup.wrap(argv)
            process = await asyncio.create_subprocess_exec(
                *argv, stdin=asyncio.subprocess.DEVNULL, stdout=console,
                stderr=console, start_new_session=True, env=QEMU_ENV,
                pass_fds=[guest_qmp.fileno(), guest_agent.fileno(), guest_egress.fileno(),
                          *launch.inherit, *owned])
            self.backstop.register(instance_id,
                                   cgroups=() if cgroup is None else (cgroup.name,),
                                   pids=(process.pid,))
            if lease is not None:
                self._leases[instance_id] = lease
        except BaseException as exc:
            host_qmp.close()
            host_agent.close()
            host_egress.close()
            if cgroup is not None:
                cgroup.destroy()
            if lease is not None:
                lease.release()
            self.backstop.forget(instance_id)
            shutil.rmtree(directory, ignore_errors=True)
            if isinstance(exc, OSError):
                raise SandboxUnavailable(f"could not start QEMU: {exc}") from exc
            raise
        finally:
            for fd in owned:  # QEMU has its copies now (or never will)
                with contextlib.suppress(OSError):
                    os.close(fd)
            guest_qmp.close()
            guest_agent.close()
            guest_egress.close()

        reader, writer = await asyncio.open_unix_connection(sock=host_agent,
                                                            limit=MAX_LINE_BYTES)
        channel = AgentChannel(reader, writer)
        egress = EgressPort(host_egress)
        try:
            async with asyncio.timeout(QMP_TIMEOUT_S):
                qmp = await QmpClient.connect(host_qmp)
        except (TimeoutError, OSError, QmpError):
            channel.close()
            await egress.close()
            await _kill(process)
            if cgroup is not None:
                cgroup.destroy()
            self._forget(instance_id)
            message = _failure("QEMU did not start", directory)
            shutil.rmtree(directory, ignore_errors=True)
            raise SandboxUnavailable(message) from None
        instance = MicroVmInstance(instance_id, process, qmp, channel, egress, cgroup,
                                   directory, self._forget,
                                   None if lease is None else lease.uid)
        self._instances[instance_id] = instance
        if fresh_boot:
            try:
                await channel.wait_ready(BOOT_TIMEOUT_S)
            except (TimeoutError, OSError, asyncio.IncompleteReadError, SandboxLost) as exc:
                message = _failure(f"the guest agent did not start ({type(exc).__name__}; "
                                   "TENANTRY_SANDBOX_DEBUG=1 shows the guest console)",
                                   directory)
                await instance.destroy()
                raise SandboxUnavailable(message) from None
        return instance

    def _forget(self, instance_id: str) -> None:
        """After the VM's process (and cgroup) is gone: its record and its uid go too."""
        self._instances.pop(instance_id, None)
        self.backstop.forget(instance_id)
        lease = self._leases.pop(instance_id, None)
        if lease is not None:
            lease.release()

    def _cgroup(self, instance_id: str, limits: Limits) -> CgroupV1 | None:
        if os.geteuid() != 0 or not CgroupV1.available():
            return None  # development hosts without root: QEMU runs unconfined by cgroups
        return CgroupV1.create(
            f"microvm-{instance_id}", memory_bytes=(limits.memory_mib + QEMU_OVERHEAD_MIB) << 20,
            cpus=limits.cpus, pids=QEMU_MAX_TASKS)


async def _kill(process: asyncio.subprocess.Process) -> None:
    if process.returncode is None:
        with contextlib.suppress(ProcessLookupError):
            process.send_signal(signal.SIGKILL)
    await process.wait()


def _failure(message: str, directory: Path) -> str:
    with contextlib.suppress(OSError):
        tail = (directory / "console.log").read_text(errors="replace")[-1500:].strip()
        if tail:
            return f"{message}; QEMU said: {tail}"
    return message
