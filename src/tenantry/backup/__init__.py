"""Backups and point-in-time recovery of a cell's Postgres (ADR 0036): pgBackRest archives
the WAL and takes the backups; Tenantry reads its state and restores a cell to a point in
time into a new data directory, refusing what would go wrong late.

- ``pgbackrest``: the tool's ``info`` (read into typed values) and ``restore``.
- ``status``: is the cell restorable, and to which times (``tenantry backup status``).
- ``restore``: checks first, then one restore (``tenantry backup restore``).
"""

from tenantry.backup.pgbackrest import Backup, BackupError, PgBackRest, StanzaInfo

__all__ = ["Backup", "BackupError", "PgBackRest", "StanzaInfo"]
