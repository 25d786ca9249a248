"""An activity's code as an immutable value: files by relative POSIX path, an entrypoint
``"<module path>.py:<function>"`` and a digest over a canonical encoding (the same files and
entrypoint always give the same digest, whatever order they came in). Every rule raises a
one-line ValueError; the API turns it into a 400."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

MAX_BUNDLE_BYTES = 1024 * 1024  # all files together
MAX_FILES = 64
MAX_PATH_CHARS = 255
_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_ENCODING = b"tenantry-bundle/1\n"


@dataclass(frozen=True, slots=True)
class Bundle:
    files: Mapping[str, bytes]
    entrypoint: str
    digest: str = field(init=False)

    def __post_init__(self) -> None:
        files = dict(self.files)
        if not files:
            raise ValueError("a bundle needs at least one file")
        if len(files) > MAX_FILES:
            raise ValueError(f"a bundle holds at most {MAX_FILES} files, not {len(files)}")
        total = 0
        for path, data in files.items():
            _check_path(path)
            if not isinstance(data, bytes):
                raise ValueError(f"bundle file {path!r}: contents must be bytes")
            total += len(data)
        if total > MAX_BUNDLE_BYTES:
            raise ValueError(f"a bundle is at most {MAX_BUNDLE_BYTES} bytes, not {total}")
        for path in files:  # "a" and "a/b" cannot both be files
            parent = path.rpartition("/")[0]
            while parent:
                if parent in files:
                    raise ValueError(f"bundle path {parent!r} is a file and a folder")
                parent = parent.rpartition("/")[0]
        _check_entrypoint(self.entrypoint, files)
        object.__setattr__(self, "files", MappingProxyType(files))
        object.__setattr__(self, "digest", _digest(files, self.entrypoint))

    @property
    def size(self) -> int:
        return sum(len(data) for data in self.files.values())


def _check_path(path: object) -> None:
    if not isinstance(path, str) or not path:
        raise ValueError("a bundle path must be a non-empty string")
    if len(path) > MAX_PATH_CHARS:
        raise ValueError(f"bundle path longer than {MAX_PATH_CHARS} characters: {path[:40]!r}…")
    if "\x00" in path:
        raise ValueError(f"bundle path contains a NUL byte: {path!r}")
    if "\\" in path:
        raise ValueError(f"bundle path contains a backslash (use '/'): {path!r}")
    if path.startswith("/"):
        raise ValueError(f"bundle path must be relative: {path!r}")
    if any(part in ("", ".", "..") for part in path.split("/")):
        raise ValueError(f"bundle path has an empty, '.' or '..' part: {path!r}")


def _check_entrypoint(entrypoint: object, files: Mapping[str, bytes]) -> None:
    if not isinstance(entrypoint, str):
        raise ValueError("entrypoint must be a string like 'main.py:handle'")
    path, sep, function = entrypoint.partition(":")
    if not sep or not path.endswith(".py") or not _IDENTIFIER.fullmatch(function):
        raise ValueError(f"entrypoint must look like 'main.py:handle', not {entrypoint!r}")
    if not all(_IDENTIFIER.fullmatch(part) for part in path[: -len(".py")].split("/")):
        raise ValueError(f"entrypoint module {path!r} is not an importable module path")
    if path not in files:
        raise ValueError(f"entrypoint module {path!r} is not a file of the bundle")


def _digest(files: Mapping[str, bytes], entrypoint: str) -> str:
    """sha256 over length-prefixed fields in path order: no two bundles encode alike."""
    h = hashlib.sha256(_ENCODING)
    for text in (entrypoint.encode(), str(len(files)).encode()):
        h.update(b"%d:%s" % (len(text), text))
    for path in sorted(files):
        name = path.encode()
        h.update(b"%d:%s%d:" % (len(name), name, len(files[path])))
        h.update(files[path])
    return "sha256:" + h.hexdigest()
