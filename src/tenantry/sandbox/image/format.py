"""Formats the image builder reads and writes, in plain Python so the output does not depend
on host tools: the newc cpio archive (deterministic), ELF ``DT_NEEDED`` lists, the
uncompressed kernel inside a bzImage, kernel modules."""

from __future__ import annotations

import gzip
import lzma
import os
import shutil
import stat
import struct
import subprocess
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

#: Every entry's mtime: fixed, so two builds are byte-identical.
MTIME = 0


@dataclass(frozen=True, slots=True)
class Entry:
    mode: int  # st_mode, type bits included
    data: bytes | None = None  # inline content (or a symlink's target)
    source: Path | None = None  # content read from this file at write time
    uid: int = 0
    gid: int = 0
    rdev: tuple[int, int] = (0, 0)


class Tree:
    """Archive entries by path (no leading slash); parents are added as needed."""

    def __init__(self) -> None:
        self.entries: dict[str, Entry] = {}

    def _parents(self, path: str) -> None:
        parent = os.path.dirname(path)
        while parent and parent not in self.entries:
            self.entries[parent] = Entry(stat.S_IFDIR | 0o755)
            parent = os.path.dirname(parent)

    def _put(self, path: str, entry: Entry) -> None:
        self._parents(path)
        self.entries[path] = entry

    def directory(self, path: str, *, mode: int = 0o755, uid: int = 0, gid: int = 0) -> None:
        self._put(path, Entry(stat.S_IFDIR | mode, uid=uid, gid=gid))

    def symlink(self, path: str, target: str) -> None:
        self._put(path, Entry(stat.S_IFLNK | 0o777, data=target.encode()))

    def node(self, path: str, *, major: int, minor: int, mode: int) -> None:
        self._put(path, Entry(stat.S_IFCHR | mode, rdev=(major, minor)))

    def data(self, path: str, content: bytes, *, mode: int = 0o644) -> None:
        self._put(path, Entry(stat.S_IFREG | mode, data=content))

    def file(self, path: str, source: Path) -> None:
        # Only the execute bit carries over from the package: owners and odd modes do not.
        executable = source.stat().st_mode & 0o111
        self._put(path, Entry(stat.S_IFREG | (0o755 if executable else 0o644), source=source))

    def library(self, path: str, source: Path) -> None:
        """A library file, or a symlink as the package ships it (soname → real file)."""
        if source.is_symlink():
            self.symlink(path, os.readlink(source))
        else:
            self.file(path, source)

    def add_dir_tree(self, staging: Path, relative: str) -> None:
        root = staging / relative
        for directory, subdirs, files in os.walk(root):
            subdirs.sort()
            base = Path(directory)
            self.directory(str(base.relative_to(staging)))
            for name in sorted(files):
                path = base / name
                archive = str(path.relative_to(staging))
                if path.is_symlink():
                    self.symlink(archive, os.readlink(path))
                else:
                    self.file(archive, path)


def write_cpio(out: BinaryIO, entries: dict[str, Entry]) -> int:
    """A newc ("070701") archive of ``entries`` in sorted path order (a parent sorts before
    its children), inode numbers in that order, a fixed mtime. Returns the entry count."""
    offset = 0

    def emit(chunk: bytes) -> None:
        nonlocal offset
        out.write(chunk)
        offset += len(chunk)

    def pad() -> None:
        if offset % 4:
            emit(b"\0" * (4 - offset % 4))

    def header(ino: int, mode: int, uid: int, gid: int, nlink: int, size: int,
               rdev: tuple[int, int], name: bytes) -> None:
        fields = (ino, mode, uid, gid, nlink, MTIME, size, 0, 0, rdev[0], rdev[1],
                  len(name) + 1, 0)
        emit(b"070701" + b"".join(b"%08X" % value for value in fields))
        emit(name + b"\0")
        pad()

    for ino, path in enumerate(sorted(entries), start=1):
        entry = entries[path]
        if entry.source is not None:
            size = entry.source.stat().st_size
            header(ino, entry.mode, entry.uid, entry.gid, 1, size, entry.rdev, path.encode())
            with entry.source.open("rb") as source:
                shutil.copyfileobj(source, out, 1 << 20)
            offset += size
        else:
            content = entry.data or b""
            nlink = 2 if stat.S_ISDIR(entry.mode) else 1
            header(ino, entry.mode, entry.uid, entry.gid, nlink, len(content), entry.rdev,
                   path.encode())
            emit(content)
        pad()
    header(0, 0, 0, 0, 1, 0, (0, 0), b"TRAILER!!!")
    return len(entries)


# -- ELF -------------------------------------------------------------------------------

DT_NEEDED = 1
DT_STRTAB = 5
PT_LOAD = 1
PT_DYNAMIC = 2


def needed(path: Path) -> list[str]:
    """The DT_NEEDED sonames of a 64-bit little-endian ELF file ([] if static)."""
    data = path.read_bytes()
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        raise ValueError(f"{path} is not a 64-bit little-endian ELF file")
    phoff, = struct.unpack_from("<Q", data, 0x20)
    phentsize, phnum = struct.unpack_from("<HH", data, 0x36)
    loads: list[tuple[int, int, int]] = []
    dynamic: tuple[int, int] | None = None
    for index in range(phnum):
        p_type, _flags, p_offset, p_vaddr, _paddr, p_filesz = struct.unpack_from(
            "<IIQQQQ", data, phoff + index * phentsize)
        if p_type == PT_LOAD:
            loads.append((p_vaddr, p_offset, p_filesz))
        elif p_type == PT_DYNAMIC:
            dynamic = (p_offset, p_filesz)
    if dynamic is None:
        return []
    strtab_vaddr = 0
    offsets: list[int] = []
    for position in range(dynamic[0], dynamic[0] + dynamic[1], 16):
        tag, value = struct.unpack_from("<qQ", data, position)
        if tag == 0:
            break
        if tag == DT_NEEDED:
            offsets.append(value)
        elif tag == DT_STRTAB:
            strtab_vaddr = value
    strtab = next(offset + strtab_vaddr - vaddr for vaddr, offset, size in loads
                  if vaddr <= strtab_vaddr < vaddr + size)
    return [data[strtab + o:data.index(b"\0", strtab + o)].decode() for o in offsets]


def needed_closure(elves: list[Path], libdirs: list[Path]) -> list[Path]:
    """Every library file (soname symlinks and their targets) the given ELF files need,
    transitively, found in ``libdirs``. A soname found nowhere fails by name."""
    found: dict[str, Path] = {}
    pending = [*elves]
    missing: dict[str, str] = {}
    while pending:
        current = pending.pop()
        for soname in needed(current):
            if soname in found or soname in missing:
                continue
            candidates = [d / soname for d in libdirs if (d / soname).exists()]
            if not candidates:
                missing[soname] = current.name
                continue
            found[soname] = candidates[0]
            pending.append(candidates[0].resolve())
    if missing:
        detail = ", ".join(f"{so} (needed by {by})" for so, by in sorted(missing.items()))
        raise LookupError(f"shared libraries not in the image's packages: {detail}; add "
                          "the Debian package that ships each (dpkg -S <soname>) to "
                          "image.LIB_PACKAGES")
    files: set[Path] = set()
    for link in found.values():
        files.add(link)
        target = link
        while target.is_symlink():
            target = target.parent / os.readlink(target)
            files.add(target)
    return sorted(files)


# -- kernel ----------------------------------------------------------------------------

_MAGICS = (("gzip", b"\x1f\x8b\x08"), ("xz", b"\xfd7zXZ\x00"), ("zstd", b"\x28\xb5\x2f\xfd"),
           ("lz4", b"\x02\x21\x4c\x18"), ("lzma", b"\x5d\x00\x00"))


def extract_vmlinux(bzimage: bytes) -> bytes | None:
    """The uncompressed ELF kernel inside a bzImage (QEMU boots it through its PVH entry,
    skipping the decompressor: faster under emulation). None if no payload decompresses to
    an ELF. The payload's offset comes from the boot header; magic search is the fallback."""
    starts: list[int] = []
    if len(bzimage) > 0x250 and bzimage[0x202:0x206] == b"HdrS":
        setup_sects = bzimage[0x1F1] or 4
        payload_offset, = struct.unpack_from("<I", bzimage, 0x248)
        starts.append((setup_sects + 1) * 512 + payload_offset)
    for _name, magic in _MAGICS:
        position = bzimage.find(magic)
        while position != -1 and len(starts) < 64:
            starts.append(position)
            position = bzimage.find(magic, position + 1)
    for start in starts:
        blob = bzimage[start:]
        for name, magic in _MAGICS:
            if blob.startswith(magic):
                elf = _decompress(name, blob)
                if elf is not None and elf[:4] == b"\x7fELF":
                    return elf
    return None


def _decompress(kind: str, blob: bytes) -> bytes | None:
    """Decompress a stream followed by trailing bytes (the rest of the bzImage)."""
    try:
        if kind == "gzip":
            return zlib.decompressobj(wbits=31).decompress(blob)
        if kind in ("xz", "lzma"):
            fmt = lzma.FORMAT_XZ if kind == "xz" else lzma.FORMAT_ALONE
            return lzma.LZMADecompressor(format=fmt).decompress(blob)
    except (zlib.error, lzma.LZMAError, EOFError):
        return None
    # zstd and lz4 have no stdlib decoder: their command-line tools (Debian: zstd, lz4)
    # write what they decoded before complaining about the trailing bytes.
    tool = {"zstd": ["zstd", "-dcq"], "lz4": ["lz4", "-dcq"]}[kind]
    try:
        done = subprocess.run(tool, input=blob, capture_output=True, check=False)
    except FileNotFoundError:
        return None
    return done.stdout or None


def find_module(module_root: Path, name: str) -> bytes:
    """A kernel module's bytes, decompressed if the kernel ships .ko.xz/.ko.gz/.ko.zst."""
    for path in sorted(module_root.rglob(f"{name}.ko*")):
        raw = path.read_bytes()
        if path.suffix == ".ko":
            return raw
        if path.suffix == ".xz":
            return lzma.decompress(raw)
        if path.suffix == ".gz":
            return gzip.decompress(raw)
        if path.suffix == ".zst":
            done = subprocess.run(["zstd", "-dcq"], input=raw, capture_output=True, check=True)
            return done.stdout
    raise FileNotFoundError(f"kernel module {name} not found under {module_root}")
