"""Sandboxes (DESIGN §10): one per run, never reused, no network, ready from a warm pool.
Backends: ``microvm`` (QEMU microvm, the default), ``gvisor`` (runsc), ``bwrap``
(development only). Built-in code and file tools run here through the tool gateway."""

from tenantry.sandbox.sandbox import Sandbox, SavedFiles
from tenantry.sandbox.types import (
    EXIT_KILLED,
    EXIT_TIMEOUT,
    Binding,
    ExecResult,
    FileEntry,
    Limits,
    SandboxDriver,
    SandboxError,
    SandboxLost,
    SandboxRefused,
    SandboxUnavailable,
)

__all__ = [
    "EXIT_KILLED", "EXIT_TIMEOUT", "Binding", "ExecResult", "FileEntry", "Limits", "Sandbox",
    "SandboxDriver", "SandboxError", "SandboxLost", "SandboxRefused", "SandboxUnavailable",
    "SavedFiles",
]
