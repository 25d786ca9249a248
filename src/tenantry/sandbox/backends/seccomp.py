"""A classic-BPF seccomp filter built in pure Python, for x86_64.

The output is the raw ``struct sock_filter[]`` that ``bwrap --seccomp FD`` (and
``prctl(PR_SET_SECCOMP)``) take. The policy is a deny-list: syscalls that reach into the
kernel's administration, other processes, namespaces or mounts fail with EPERM; everything
else is allowed, so ordinary Python and its tools keep working. The sandbox's other walls
(namespaces, no capabilities, cgroups) remain; this removes attack surface on the shared
kernel, it is not the boundary on its own (bwrap is development-only: ADR 0005)."""

from __future__ import annotations

import errno
import struct

# <linux/filter.h> / <linux/bpf_common.h>
BPF_LD_W_ABS = 0x00 | 0x00 | 0x20  # BPF_LD | BPF_W | BPF_ABS
BPF_JMP_JEQ_K = 0x05 | 0x10 | 0x00  # BPF_JMP | BPF_JEQ | BPF_K
BPF_JMP_JGE_K = 0x05 | 0x30 | 0x00  # BPF_JMP | BPF_JGE | BPF_K
BPF_JMP_JSET_K = 0x05 | 0x40 | 0x00  # BPF_JMP | BPF_JSET | BPF_K
BPF_RET_K = 0x06 | 0x00  # BPF_RET | BPF_K

# <linux/seccomp.h>
SECCOMP_RET_KILL_PROCESS = 0x80000000
SECCOMP_RET_ERRNO = 0x00050000
SECCOMP_RET_ALLOW = 0x7FFF0000

# <linux/audit.h>: EM_X86_64 | __AUDIT_ARCH_64BIT | __AUDIT_ARCH_LE
AUDIT_ARCH_X86_64 = 0xC000003E
# x32 syscalls share the x86_64 arch value but set this bit in the number.
X32_SYSCALL_BIT = 0x40000000

# struct seccomp_data offsets: int nr; __u32 arch; __u64 instruction_pointer; __u64 args[6]
OFFSET_NR = 0
OFFSET_ARCH = 4
OFFSET_ARG0_LOW = 16  # little-endian: the low 32 bits of args[0] come first

#: x86_64 syscall numbers (asm/unistd_64.h) that fail with EPERM.
DENIED: dict[str, int] = {
    "ptrace": 101,
    "syslog": 103,
    "personality": 135,
    "uselib": 134,
    "adjtimex": 159,
    "pivot_root": 155,
    "chroot": 161,
    "acct": 163,
    "settimeofday": 164,
    "mount": 165,
    "umount2": 166,
    "swapon": 167,
    "swapoff": 168,
    "reboot": 169,
    "iopl": 172,
    "ioperm": 173,
    "init_module": 175,
    "delete_module": 176,
    "quotactl": 179,
    "clock_settime": 227,
    "kexec_load": 246,
    "add_key": 248,
    "request_key": 249,
    "keyctl": 250,
    "unshare": 272,
    "perf_event_open": 298,
    "name_to_handle_at": 303,
    "open_by_handle_at": 304,
    "clock_adjtime": 305,
    "setns": 308,
    "process_vm_readv": 310,
    "process_vm_writev": 311,
    "finit_module": 313,
    "kexec_file_load": 320,
    "bpf": 321,
    "userfaultfd": 323,
    "io_uring_setup": 425,
    "io_uring_enter": 426,
    "io_uring_register": 427,
    # The new mount API would otherwise walk around the ban on mount(2).
    "open_tree": 428,
    "move_mount": 429,
    "fsopen": 430,
    "fsconfig": 431,
    "fsmount": 432,
    "fspick": 433,
    "mount_setattr": 442,
}

SYS_CLONE = 56
SYS_CLONE3 = 435
#: clone(2) flags that create namespaces: the same door as unshare(2).
CLONE_NAMESPACE_FLAGS = (
    0x00000080  # CLONE_NEWTIME
    | 0x00020000  # CLONE_NEWNS
    | 0x02000000  # CLONE_NEWCGROUP
    | 0x04000000  # CLONE_NEWUTS
    | 0x08000000  # CLONE_NEWIPC
    | 0x10000000  # CLONE_NEWUSER
    | 0x20000000  # CLONE_NEWPID
    | 0x40000000  # CLONE_NEWNET
)

_INSN = struct.Struct("=HBBI")  # struct sock_filter { u16 code; u8 jt; u8 jf; u32 k; }


def _stmt(code: int, k: int) -> bytes:
    return _INSN.pack(code, 0, 0, k)


def _jump(code: int, k: int, jt: int, jf: int) -> bytes:
    return _INSN.pack(code, jt, jf, k)


def deny_list_program(denied: dict[str, int] | None = None) -> bytes:
    """The filter as bytes (8 per instruction), ready for ``bwrap --seccomp FD``."""
    eperm = SECCOMP_RET_ERRNO | errno.EPERM
    insns = [
        _stmt(BPF_LD_W_ABS, OFFSET_ARCH),
        # Any other ABI (i386 via int 0x80) would see different syscall numbers: kill.
        _jump(BPF_JMP_JEQ_K, AUDIT_ARCH_X86_64, 1, 0),
        _stmt(BPF_RET_K, SECCOMP_RET_KILL_PROCESS),
        _stmt(BPF_LD_W_ABS, OFFSET_NR),
        _jump(BPF_JMP_JGE_K, X32_SYSCALL_BIT, 0, 1),
        _stmt(BPF_RET_K, eperm),
    ]
    for number in sorted((DENIED if denied is None else denied).values()):
        insns += [_jump(BPF_JMP_JEQ_K, number, 0, 1), _stmt(BPF_RET_K, eperm)]
    insns += [
        # clone3 passes its flags in memory BPF cannot read: report it missing, so libc
        # falls back to clone(2), whose flags we can check (what Docker does too).
        _jump(BPF_JMP_JEQ_K, SYS_CLONE3, 0, 1),
        _stmt(BPF_RET_K, SECCOMP_RET_ERRNO | errno.ENOSYS),
        _jump(BPF_JMP_JEQ_K, SYS_CLONE, 0, 3),
        _stmt(BPF_LD_W_ABS, OFFSET_ARG0_LOW),
        _jump(BPF_JMP_JSET_K, CLONE_NAMESPACE_FLAGS, 0, 1),
        _stmt(BPF_RET_K, eperm),
        _stmt(BPF_RET_K, SECCOMP_RET_ALLOW),
    ]
    return b"".join(insns)


def decode(program: bytes) -> list[tuple[int, int, int, int]]:
    """(code, jt, jf, k) per instruction: for tests and debugging."""
    return [_INSN.unpack_from(program, i) for i in range(0, len(program), _INSN.size)]
