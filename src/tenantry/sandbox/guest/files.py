"""The guest agent's work-directory requests (``write``, ``read``, ``list``, ``save``,
``restore``), every path kept inside the work directory; and :class:`Refused`, the agent's
one error. Standard library only: ``agent.py`` loads this file from beside itself (the
sandbox runs it as ``python3 -I /agent.py``: no package, no ``sys.path`` entry for it), so
every backend puts it there, and the microVM image holds it (``sandbox/image/build.py``)."""

from __future__ import annotations

import base64
import io
import os
import stat
import tarfile
from typing import Any

MAX_FILE_BYTES = 16 * 1024 * 1024
MAX_SAVE_BYTES = 64 * 1024 * 1024
MAX_LIST_ENTRIES = 1000


class Refused(Exception):
    """A request the agent will not carry out; the message goes back to the host."""


def write(workdir: str, uid: int | None, request: dict[str, Any]) -> dict[str, Any]:
    path = _path(workdir, str(request.get("path", "")))
    data = base64.b64decode(str(request.get("data", "")))
    if len(data) > MAX_FILE_BYTES:
        raise Refused(f"file larger than {MAX_FILE_BYTES} bytes")
    parent = os.path.dirname(path)
    _makedirs(parent, uid)
    with open(path, "wb") as f:
        f.write(data)
    _own(path, uid)
    return {"bytes": len(data)}


def read(workdir: str, request: dict[str, Any]) -> dict[str, Any]:
    path = _path(workdir, str(request.get("path", "")))
    limit = min(int(request.get("max_bytes", MAX_FILE_BYTES)), MAX_FILE_BYTES)
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            data = f.read(limit)
    except FileNotFoundError:
        raise Refused(f"no such file: {request.get('path')}") from None
    except IsADirectoryError:
        raise Refused(f"is a directory: {request.get('path')}") from None
    return {"data": base64.b64encode(data).decode(), "size": size,
            "truncated": size > len(data)}


def listing(workdir: str, request: dict[str, Any]) -> dict[str, Any]:
    path = _path(workdir, str(request.get("path") or "."))
    entries = []
    try:
        names = sorted(os.listdir(path))
    except FileNotFoundError:
        raise Refused(f"no such directory: {request.get('path') or '.'}") from None
    except NotADirectoryError:
        raise Refused(f"not a directory: {request.get('path')}") from None
    for name in names[:MAX_LIST_ENTRIES]:
        info = os.lstat(os.path.join(path, name))
        kind = ("dir" if stat.S_ISDIR(info.st_mode) else "file"
                if stat.S_ISREG(info.st_mode) else "link"
                if stat.S_ISLNK(info.st_mode) else "other")
        entries.append({"name": name, "kind": kind, "size": info.st_size})
    return {"entries": entries, "truncated": len(names) > MAX_LIST_ENTRIES}


def save(workdir: str) -> dict[str, Any]:
    """The whole work directory as a gzipped tar (regular files, dirs, links)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz", compresslevel=1) as tar:
        for root, dirs, files in os.walk(workdir):
            dirs.sort()
            for name in [*dirs, *sorted(files)]:
                full = os.path.join(root, name)
                rel = os.path.relpath(full, workdir)
                info = os.lstat(full)
                if not (stat.S_ISREG(info.st_mode) or stat.S_ISDIR(info.st_mode)
                        or stat.S_ISLNK(info.st_mode)):
                    continue
                tar.add(full, arcname=rel, recursive=False)
                if buffer.tell() > MAX_SAVE_BYTES:
                    raise Refused(f"work directory larger than {MAX_SAVE_BYTES} bytes "
                                  "compressed; not saved")
    data = buffer.getvalue()
    return {"tar": base64.b64encode(data).decode(), "bytes": len(data)}


def restore(workdir: str, uid: int | None, request: dict[str, Any]) -> dict[str, Any]:
    data = base64.b64decode(str(request.get("tar", "")))
    restored = 0
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:*") as tar:
        for member in tar.getmembers():
            target = _path(workdir, member.name)  # refuses names that leave the workdir
            if member.isdir():
                _makedirs(target, uid)
            elif member.isfile():
                _makedirs(os.path.dirname(target), uid)
                source = tar.extractfile(member)
                assert source is not None
                with open(target, "wb") as f:
                    f.write(source.read())
                os.chmod(target, member.mode & 0o755)
                _own(target, uid)
                restored += 1
            elif member.issym():
                _makedirs(os.path.dirname(target), uid)
                # A link is restored as it was; reads through it are checked on use.
                if os.path.lexists(target):
                    os.unlink(target)
                os.symlink(member.linkname, target)
            # devices, fifos and hard links are never restored
    return {"files": restored}


def _path(workdir: str, relative: str) -> str:
    if not relative or "\x00" in relative:
        raise Refused("a path is required")
    full = os.path.realpath(os.path.join(workdir, relative.lstrip("/")))
    if full != workdir and not full.startswith(workdir + os.sep):
        raise Refused(f"path outside the work directory: {relative}")
    return full


def _makedirs(path: str, uid: int | None) -> None:
    if not os.path.isdir(path):
        os.makedirs(path, exist_ok=True)
        _own(path, uid)


def _own(path: str, uid: int | None) -> None:
    if uid is not None:
        os.chown(path, uid, uid)
