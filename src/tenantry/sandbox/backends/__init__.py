"""Sandbox backends (ADR 0005): ``microvm`` (QEMU microvm, the default), ``gvisor``
(runsc) and ``bwrap`` (development only), each implementing ``protocol.Backend``. No
backend module imports another: what gVisor and bwrap share (a sandbox held by one child
process on stdio) is ``child.py``; cgroups, seccomp and orphan reaping are shared helpers.
``sandbox/probe.py`` imports only the backend it builds."""
