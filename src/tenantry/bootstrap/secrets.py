"""A process's own secrets: the operator token and the vault master key, from
configuration or (development) kept in the data dir, mode 0600, across restarts."""

from __future__ import annotations

import os
import secrets
import uuid
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
    return create_private(path, "op_" + secrets.token_urlsafe(32)).strip()


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
    return MasterKey.parse(create_private(path, MasterKey.generate().encoded()))


def replace_dev_key(settings: Settings, new: MasterKey) -> bool:
    """After a rotation: the data dir's dev key becomes ``new``, if that is where the
    current key came from. True if it was replaced."""
    path = settings.data_dir / "master_key"
    if settings.master_key is not None or not path.exists():
        return False
    write_private(path, new.encoded())
    return True


def write_private(path: Path, text: str) -> None:
    """``text`` into ``path``, readable by this user only, replaced atomically."""
    tmp = _private_tmp(path, text)
    os.replace(tmp, path)


def create_private(path: Path, text: str) -> str:
    """``text`` into ``path`` unless another process made it first; what ``path`` holds.

    Several processes sharing a data dir (``tenantry worker --processes N``, a fleet) may
    all find the file missing at once: each must end up with the same secret, so the
    first one to link its file in wins and the others read it."""
    tmp = _private_tmp(path, text)
    try:
        os.link(tmp, path)  # refuses an existing name, unlike rename
    except FileExistsError:
        return path.read_text()
    finally:
        tmp.unlink()
    return text


def _private_tmp(path: Path, text: str) -> Path:
    # A name of this process's own: two writers never share (or remove) a temporary file.
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{uuid.uuid4().hex}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    return tmp
