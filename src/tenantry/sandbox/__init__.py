"""Sandboxes (ADR 0005): one per run, never reused, no network, ready from a warm pool.
Backends: ``microvm`` (QEMU microvm, the default), ``gvisor`` (runsc), ``bwrap``
(development only). The built-in code and file tools (``tenantry/tools/builtin.py``) run
here through the tool gateway.

At the top: the warm pool (``pool``), the manager (``manager``), the bound sandbox
(``sandbox``), the agent channel (``channel``), the vocabulary (``types``) and the start-up
probe (``probe``). The parts: ``backends/``, ``egress/``, ``image/`` and ``guest/`` (what
runs inside a sandbox; standard library only)."""

from tenantry.sandbox.sandbox import Sandbox, SandboxDriver, SavedFiles
from tenantry.sandbox.types import (
    EXIT_KILLED,
    EXIT_TIMEOUT,
    Binding,
    ExecResult,
    FileEntry,
    Limits,
    ResourceUsage,
    SandboxError,
    SandboxLost,
    SandboxRefused,
    SandboxUnavailable,
)

__all__ = [
    "EXIT_KILLED", "EXIT_TIMEOUT", "Binding", "ExecResult", "FileEntry", "Limits",
    "ResourceUsage", "Sandbox", "SandboxDriver", "SandboxError", "SandboxLost",
    "SandboxRefused", "SandboxUnavailable", "SavedFiles",
]
