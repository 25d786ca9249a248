"""The tenant's audit trail: every tool call (written by the tool gateway, tools/audit.py)
and every change to the tenant's account (written here, for each request that made one),
read together, newest first (issue 41, ADR 0043)."""
