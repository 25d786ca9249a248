"""The seccomp deny-list: its BPF evaluated instruction by instruction, then the real
thing — a child run through bubblewrap with the filter installed."""

from __future__ import annotations

import errno
import os
import struct
import subprocess

from tenantry.sandbox.backends.seccomp import (
    AUDIT_ARCH_X86_64,
    DENIED,
    SECCOMP_RET_ALLOW,
    SECCOMP_RET_ERRNO,
    SECCOMP_RET_KILL_PROCESS,
    decode,
    deny_list_program,
)

AUDIT_ARCH_I386 = 0x40000003
CLONE_NEWUSER = 0x10000000
CLONE_THREAD_FLAGS = 0x003D0F00  # what glibc's pthread_create passes
SIGCHLD = 17


def run_filter(program: bytes, nr: int, arch: int = AUDIT_ARCH_X86_64, arg0: int = 0) -> int:
    """A classic-BPF interpreter for the instructions the program uses."""
    data = struct.pack("=iIQ6Q", nr, arch, 0, arg0, 0, 0, 0, 0, 0)
    insns = decode(program)
    pc, acc = 0, 0
    while True:
        code, jt, jf, k = insns[pc]
        if code == 0x20:  # ld [k]
            acc = struct.unpack_from("=I", data, k)[0]
            pc += 1
        elif code == 0x06:  # ret k
            return k
        else:
            taken = {0x15: acc == k, 0x35: acc >= k, 0x45: bool(acc & k)}[code]
            pc += 1 + (jt if taken else jf)


def test_denied_syscalls_get_eperm_and_the_rest_are_allowed() -> None:
    program = deny_list_program()
    assert len(program) % 8 == 0 and len(program) // 8 < 4096  # the kernel's BPF_MAXINSNS
    for name, nr in DENIED.items():
        assert run_filter(program, nr) == SECCOMP_RET_ERRNO | errno.EPERM, name
    for nr in (0, 1, 2, 9, 57, 59, 231, 257):  # read write open mmap fork execve exit_group
        assert run_filter(program, nr) == SECCOMP_RET_ALLOW


def test_foreign_abis_are_refused() -> None:
    program = deny_list_program()
    assert run_filter(program, 0, arch=AUDIT_ARCH_I386) == SECCOMP_RET_KILL_PROCESS
    assert run_filter(program, 0x40000000 | 1) == SECCOMP_RET_ERRNO | errno.EPERM  # x32


def test_clone_may_make_threads_and_processes_but_not_namespaces() -> None:
    program = deny_list_program()
    assert run_filter(program, 56, arg0=CLONE_THREAD_FLAGS) == SECCOMP_RET_ALLOW
    assert run_filter(program, 56, arg0=SIGCHLD) == SECCOMP_RET_ALLOW
    assert run_filter(program, 56, arg0=CLONE_NEWUSER | SIGCHLD) == (
        SECCOMP_RET_ERRNO | errno.EPERM
    )
    assert run_filter(program, 435) == SECCOMP_RET_ERRNO | errno.ENOSYS  # clone3


PROBE = """
import ctypes, os, subprocess, threading
libc = ctypes.CDLL(None, use_errno=True)
def errno_of(result):
    return ctypes.get_errno() if result == -1 else 0
print("personality", errno_of(libc.syscall(135, 0xFFFFFFFF)))
print("process_vm_readv", errno_of(libc.syscall(310, os.getpid(), 0, 0, 0, 0, 0)))
print("keyctl", errno_of(libc.syscall(250, 0, 0, 0, 0, 0)))
print("mount", errno_of(libc.mount(b"none", b"/tmp", b"tmpfs", 0, None)))
t = threading.Thread(target=lambda: None); t.start(); t.join()
print("thread ok")
print("child", subprocess.run(["true"]).returncode)
"""


def test_a_child_under_bwrap_with_the_filter() -> None:
    fd = os.memfd_create("seccomp-test", 0)
    try:
        os.write(fd, deny_list_program())
        os.lseek(fd, 0, os.SEEK_SET)
        argv = [
            "bwrap", "--unshare-all", "--die-with-parent", "--ro-bind", "/", "/",
            "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "--seccomp", str(fd), "--",
            "/bin/sh", "-c", 'unshare -U true; echo "unshare $?"; exec python3 -I -c "$0"',
            PROBE,
        ]
        result = subprocess.run(argv, pass_fds=(fd,), capture_output=True, text=True,
                                timeout=60, check=False)
    finally:
        os.close(fd)
    assert result.returncode == 0, result.stderr
    assert "Operation not permitted" in result.stderr
    assert result.stdout.splitlines() == [
        "unshare 1", f"personality {errno.EPERM}", f"process_vm_readv {errno.EPERM}",
        f"keyctl {errno.EPERM}", f"mount {errno.EPERM}", "thread ok", "child 0",
    ]

