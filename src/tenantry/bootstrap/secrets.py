"""A process's own secrets: the operator token and the vault master key, from
configuration or (development) kept in the data dir, mode 0600, across restarts."""

from __future__ import annotations

import secrets
from pathlib import Path

from tenantry.config import Settings
from tenantry.vault import MasterKey


def operator_token(settings: Settings) -> str:
    """The configured token, else one kept in the data dir (mode 0600) across restarts."""
    if settings.operator_token:
        return settings.operator_token
    path = settings.data_dir / "operator_token"
    if path.exists():
        return path.read_text().strip()
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    token = "op_" + secrets.token_urlsafe(32)
    write_private(path, token)
    return token


def master_key(settings: Settings, *, create: bool = False) -> MasterKey | None:
    """TENANTRY_MASTER_KEY, else the dev key kept in the data dir (made by `up` on first
    start). Production sets the variable; the file is a development convenience."""
    if settings.master_key:
        return MasterKey.parse(settings.master_key)
    path = settings.data_dir / "master_key"
    if path.exists():
        return MasterKey.parse(path.read_text())
    if not create:
        return None
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    key = MasterKey.generate()
    write_private(path, key.encoded())
    return key


def replace_dev_key(settings: Settings, new: MasterKey) -> bool:
    """After a rotation: the data dir's dev key becomes ``new``, if that is where the
    current key came from. True if it was replaced."""
    path = settings.data_dir / "master_key"
    if settings.master_key is not None or not path.exists():
        return False
    path.write_text(new.encoded())
    return True


def write_private(path: Path, text: str) -> None:
    """``text`` into ``path``, readable by this user only, replaced atomically."""
    tmp = path.with_suffix(".tmp")
    tmp.touch(mode=0o600)
    tmp.write_text(text)
    tmp.rename(path)
