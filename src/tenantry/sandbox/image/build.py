"""The microVM guest image: a Debian cloud kernel and an uncompressed initramfs
with busybox, Debian's Python 3.11 and the guest agent, built from Debian packages by
``tenantry sandbox build-image``. Nothing is downloaded at run time.

Two variants: ``code`` (the default, kept as small as it is) and ``browser`` (the code
image plus Debian's chromium-headless-shell: ``image/browser.py``). Each is addressed by a
digest over its variant, the exact package versions, ``init.sh``, the agent, the egress
relay and ``BUILDER_VERSION``: a changed agent or relay is a new image, and building what
exists is a no-op. Both live in one cache, each with its own pointer to its current image
(``images/current``, ``images/current-browser``).
The initramfs is reproducible: sorted entries, fixed mtimes and owners, bytecode compiled
with unchecked hashes under a fixed hash seed."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tenantry.sandbox.image import browser as browserimage
from tenantry.sandbox.image import format as imagefmt
from tenantry.sandbox.types import SandboxError, SandboxUnavailable

#: Bump when the builder's output changes for the same inputs.
BUILDER_VERSION = "1"
KERNEL_META_PACKAGE = "linux-image-cloud-amd64"
ROOT_PACKAGES = ("busybox-static", "python3.11-minimal", "libpython3.11-minimal",
                 "libpython3.11-stdlib")
#: Shared libraries the kept binaries need (Debian 12 names). Checked after extraction
#: against the ELF DT_NEEDED closure, so a missing one fails the build by name.
LIB_PACKAGES = ("libc6", "zlib1g", "libexpat1", "libbz2-1.0", "liblzma5", "libffi8", "libssl3",
                "libsqlite3-0", "libuuid1", "libcrypt1")
MODULES = ("virtio_ring", "virtio", "virtio_mmio", "virtio_console")
PYTHON_DIR = "usr/lib/python3.11"
#: Standard-library parts a sandbox never needs (GUIs, tests, bundled pip, 2to3).
PRUNED_DIRS = frozenset({"test", "tests", "idlelib", "tkinter", "turtledemo", "ensurepip",
                         "lib2to3", "pydoc_data", "__pycache__"})
#: Extension modules dropped: test helpers and those needing libraries we do not ship.
DROPPED_EXTENSIONS = ("_test", "_xx", "xxlimited", "_ctypes_test", "_curses", "_dbm", "nis",
                      "ossaudiodev", "readline")
SANDBOX_UID = 1000
VARIANTS = ("code", "browser")
KEEP_IMAGES = 2
GUEST_DIR = Path(__file__).parent.parent / "guest"

Progress = Callable[[str, float], None]


class ImageBuildError(SandboxError):
    type = "sandbox_image_build_failed"
    title = "Sandbox image build failed"


@dataclass(frozen=True, slots=True)
class ImageInfo:
    """A built guest image: its content digest names it, the manifest says what is in it."""

    digest: str
    kernel: Path
    initramfs: Path
    manifest: dict[str, Any] = field(compare=False, hash=False)

    @property
    def directory(self) -> Path:
        return self.initramfs.parent


def _sources() -> dict[str, bytes]:
    return {name: (GUEST_DIR / name).read_bytes()
            for name in ("init.sh", "agent.py", "files.py", "relay.py", "browser.py")}


def _source_hashes(sources: dict[str, bytes] | None = None) -> dict[str, str]:
    return {name: hashlib.sha256(data).hexdigest()
            for name, data in (sources or _sources()).items()}


def _pointer(variant: str) -> str:
    """The file in ``images/`` naming the variant's current image (the code image's keeps
    the name it always had)."""
    if variant not in VARIANTS:
        raise ValueError(f"unknown image variant {variant!r} (one of {', '.join(VARIANTS)})")
    return "current" if variant == "code" else f"current-{variant}"


def find_image(cache_dir: Path, variant: str = "code") -> ImageInfo | None:
    """The ``variant`` image last built into ``cache_dir`` if it is still current (its
    guest files match this code), else None. Reads files only: no apt, no building."""
    try:
        digest = (cache_dir / "images" / _pointer(variant)).read_text().strip()
    except OSError:
        return None
    info = _load(cache_dir / "images" / digest)
    if info is None or info.manifest.get("sources") != _source_hashes():
        return None
    if info.manifest.get("variant", "code") != variant:
        return None
    return info


def _load(directory: Path) -> ImageInfo | None:
    try:
        manifest = json.loads((directory / "manifest.json").read_text())
    except (OSError, ValueError):
        return None
    kernel = directory / str(manifest.get("kernel_file", ""))
    initramfs = directory / "initramfs.cpio"
    if not kernel.is_file() or not initramfs.is_file():
        return None
    return ImageInfo(str(manifest["digest"]), kernel, initramfs, manifest)


def build_image(cache_dir: Path, *, progress: Progress | None = None,
                variant: str = "code") -> ImageInfo:
    """Build (or find) the ``variant`` image for the current packages and guest sources."""
    report: Progress = progress or (lambda _step, _fraction: None)
    pointer = _pointer(variant)
    cache_dir.mkdir(parents=True, exist_ok=True)
    with _locked(cache_dir / "build.lock"):
        for leftover in cache_dir.glob("build-*"):  # a build killed midway; we hold the lock
            shutil.rmtree(leftover, ignore_errors=True)
        report("resolving packages", 0.0)
        record = "resolved.json" if variant == "code" else f"resolved-{variant}.json"
        versions = _resolve_versions_cached(cache_dir / record, variant)
        # Read once: the digest and the image's contents come from the same bytes.
        sources = _sources()
        recipe = {"builder": BUILDER_VERSION, "packages": versions,
                  "sources": _source_hashes(sources), "variant": variant}
        if variant == "browser":  # what it takes from the packages is said there
            recipe["browser_builder"] = hashlib.sha256(
                Path(browserimage.__file__).read_bytes()).hexdigest()
        digest = hashlib.sha256(json.dumps(recipe, sort_keys=True).encode()).hexdigest()[:32]
        images = cache_dir / "images"
        final = images / digest
        existing = _load(final)
        if existing is None:
            images.mkdir(exist_ok=True)
            debs = _download(cache_dir / "debs", versions, report)
            with tempfile.TemporaryDirectory(dir=cache_dir, prefix="build-") as scratch:
                work = Path(scratch)
                out = work / "out"
                out.mkdir()
                manifest = _assemble(work, out, debs, versions, sources, report, variant)
                manifest.update(recipe, digest=digest)
                (out / "manifest.json").write_text(json.dumps(manifest, indent=2,
                                                              sort_keys=True))
                # World-readable: QEMU runs as an unprivileged uid and opens these.
                for path in (out, *out.iterdir()):
                    path.chmod(0o755 if path.is_dir() else 0o644)
                shutil.rmtree(final, ignore_errors=True)
                out.rename(final)
            existing = _load(final)
            if existing is None:
                raise ImageBuildError(f"the image at {final} is incomplete")
        _write_atomic(images / pointer, digest + "\n")
        _prune(cache_dir, pointer, digest, debs_kept=versions)
        report("done", 1.0)
        return existing


def _prune(cache_dir: Path, pointer: str, current: str, *,
           debs_kept: dict[str, str]) -> None:
    """Per variant, keep the current image and the one before it (a process started earlier
    may still cold-boot from it); drop that variant's older ones. Never touch another
    variant's images. Drop .debs of other versions of the packages this build used (those
    of packages only another variant uses stay: that variant prunes its own)."""
    images_dir = cache_dir / "images"
    current_of: dict[str, str] = {}
    for variant in VARIANTS:
        with contextlib.suppress(OSError):
            name = _pointer(variant)
            current_of[name] = (images_dir / name).read_text().strip()
    current_of[pointer] = current
    mine = [p for p in images_dir.iterdir() if p.is_dir() and p.name not in current_of.values()
            and _variant_of(p) == _variant_named(pointer)]
    mine.sort(key=lambda p: p.stat().st_mtime, reverse=True)
    for old in mine[KEEP_IMAGES - 1:]:
        shutil.rmtree(old, ignore_errors=True)
    for deb in (cache_dir / "debs").glob("*.deb"):
        name, _, rest = deb.name.partition("_")
        version = debs_kept.get(name)
        if version is not None and not rest.startswith(version.replace(":", "%3a") + "_"):
            deb.unlink(missing_ok=True)


def _variant_named(pointer: str) -> str:
    return "code" if pointer == "current" else pointer.removeprefix("current-")


def _variant_of(directory: Path) -> str:
    """The variant an image directory holds: images built before variants, and any whose
    manifest cannot be read, count as the code variant's."""
    try:
        manifest = json.loads((directory / "manifest.json").read_text())
        return str(manifest.get("variant", "code"))
    except (OSError, ValueError, AttributeError):
        return "code"


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    tmp.write_text(text)
    tmp.replace(path)


def _run(argv: list[str], *, cwd: Path | None = None) -> str:
    try:
        done = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, check=False)
    except FileNotFoundError as exc:
        raise SandboxUnavailable(f"{argv[0]} not found: building the sandbox image needs "
                                 "Debian's apt and dpkg") from exc
    if done.returncode != 0:
        raise ImageBuildError(f"{' '.join(argv[:3])} … failed: {done.stderr.strip()[-800:]}")
    return done.stdout


def _resolve_versions_cached(record: Path, variant: str = "code") -> dict[str, str]:
    """``_resolve_versions``, remembered until apt's package lists change: apt-cache takes
    about a second per call, which would make a no-op build slow."""
    lists = Path("/var/lib/apt/lists")
    try:
        stamp = ",".join(f"{p.name}:{p.stat().st_mtime_ns}" for p in sorted(lists.iterdir())
                         if p.is_file())
    except OSError:
        stamp = ""
    # The code variant's key is what it was before variants: a cache shared with an
    # older checkout is not re-resolved back and forth.
    what = BUILDER_VERSION if variant == "code" else f"{BUILDER_VERSION}|{variant}"
    key = hashlib.sha256(f"{what}|{stamp}".encode()).hexdigest()
    with contextlib.suppress(OSError, ValueError):
        saved = json.loads(record.read_text())
        if stamp and saved.get("key") == key:
            return {str(k): str(v) for k, v in saved["versions"].items()}
    versions = _resolve_versions(variant)
    _write_atomic(record, json.dumps({"key": key, "versions": versions}, sort_keys=True))
    return versions


def _packages(variant: str) -> list[str]:
    """The variant's packages besides the kernel (the browser's: the code image's and more)."""
    names = [*ROOT_PACKAGES, *LIB_PACKAGES]
    if variant == "browser":
        names += [n for n in (*browserimage.PACKAGES, *browserimage.LIB_PACKAGES)
                  if n not in names]
    return names


def _resolve_versions(variant: str = "code") -> dict[str, str]:
    """The candidate version of every package of ``variant``, the kernel's concrete package
    included."""
    depends = _run(["apt-cache", "depends", KERNEL_META_PACKAGE])
    kernels = [line.split(":", 1)[1].strip() for line in depends.splitlines()
               if line.strip().startswith("Depends:") and "linux-image-" in line]
    if not kernels:
        raise ImageBuildError(f"{KERNEL_META_PACKAGE} names no kernel package (apt-get update?)")
    names = [kernels[0], *_packages(variant)]
    policy = _run(["apt-cache", "policy", *names])
    versions: dict[str, str] = {}
    current = ""
    for line in policy.splitlines():
        if line and not line[0].isspace() and line.endswith(":"):
            current = line[:-1]
        elif line.strip().startswith("Candidate:") and current:
            versions[current] = line.split(":", 1)[1].strip()
    missing = [n for n in names if versions.get(n) in (None, "(none)")]
    if missing:
        raise ImageBuildError(f"no installable version of {', '.join(missing)} "
                              "(apt sources? apt-get update?)")
    versions["_kernel"] = kernels[0]
    return versions


def _download(debs: Path, versions: dict[str, str], report: Progress) -> dict[str, Path]:
    """The .deb of each package at its exact version, fetched once into ``debs``."""
    debs.mkdir(parents=True, exist_ok=True)
    debs.chmod(0o755)  # apt's _apt user writes here when it can
    wanted = {name: version for name, version in versions.items() if not name.startswith("_")}

    def present(name: str, version: str) -> Path | None:
        quoted = version.replace(":", "%3a")
        found = sorted(debs.glob(f"{name}_{quoted}_*.deb"))
        return found[0] if found else None

    fetch = [f"{n}={v}" for n, v in sorted(wanted.items()) if present(n, v) is None]
    if fetch:
        report(f"downloading {len(fetch)} packages", 0.05)
        _run(["apt-get", "download", "-q", *fetch], cwd=debs)
    paths: dict[str, Path] = {}
    for name, version in wanted.items():
        path = present(name, version)
        if path is None:
            raise ImageBuildError(f"apt-get download did not produce {name} {version}")
        paths[name] = path
    return paths


def _assemble(work: Path, out: Path, debs: dict[str, Path], versions: dict[str, str],
              sources: dict[str, bytes], report: Progress, variant: str) -> dict[str, Any]:
    staging = work / "root"
    staging.mkdir()
    for index, (name, deb) in enumerate(sorted(debs.items())):
        report(f"unpacking {name}", 0.1 + 0.3 * index / len(debs))
        _run(["dpkg-deb", "-x", str(deb), str(staging)])

    report("extracting the kernel", 0.45)
    kernel_pkg = versions["_kernel"]
    release = kernel_pkg.removeprefix("linux-image-")
    vmlinuz = staging / "boot" / f"vmlinuz-{release}"
    vmlinux = imagefmt.extract_vmlinux(vmlinuz.read_bytes())
    if vmlinux is not None:
        kernel_file = "vmlinux"
        (out / kernel_file).write_bytes(vmlinux)
    else:  # an unknown compression: the bzImage boots too, only slower
        kernel_file = "vmlinuz"
        shutil.copyfile(vmlinuz, out / kernel_file)

    report("pruning and compiling the standard library", 0.55)
    _prune_python(staging)
    _compile_python(staging)

    report("writing the initramfs", 0.8)
    entries = _entries(staging, release, sources, variant)
    with (out / "initramfs.cpio").open("wb") as handle:
        count = imagefmt.write_cpio(handle, entries)
    return {"kernel_file": kernel_file, "kernel_release": release, "entries": count,
            "files": sorted(entries)}


def _prune_python(staging: Path) -> None:
    root = staging / PYTHON_DIR
    for directory, subdirs, _files in os.walk(root):
        for name in list(subdirs):
            if name in PRUNED_DIRS:
                shutil.rmtree(Path(directory) / name)
                subdirs.remove(name)
    for extension in (root / "lib-dynload").iterdir():
        if extension.name.startswith(DROPPED_EXTENSIONS):
            extension.unlink()
    for link in root.iterdir():  # Debian's sitecustomize points into /etc: not shipped
        if link.is_symlink() and os.readlink(link).startswith("/"):
            link.unlink()


def _compile_python(staging: Path) -> None:
    """Bytecode for every module, compiled by the guest's own interpreter (run through the
    extracted loader, so the host's Python version does not matter). Unchecked hashes: no
    mtime in the .pyc, no stat of the source at import. A fixed hash seed keeps the order of
    frozenset constants; one process compiling in sorted order (-B: the compiler's own
    imports leave no stale .pyc behind, -f) keeps marshal's
    reference flags (which follow refcounts), and so the bytes, the same build to build."""
    loader = staging / "lib" / "x86_64-linux-gnu" / "ld-linux-x86-64.so.2"
    libs = f"{staging}/lib/x86_64-linux-gnu:{staging}/usr/lib/x86_64-linux-gnu"
    env = {"PYTHONHOME": str(staging / "usr"), "PYTHONHASHSEED": "0", "LC_ALL": "C"}
    argv = [str(loader), "--library-path", libs, str(staging / "usr/bin/python3.11"), "-s", "-B",
            "-m", "compileall", "-q", "-f", "-d", "/" + PYTHON_DIR,
            "--invalidation-mode", "unchecked-hash", str(staging / PYTHON_DIR)]
    done = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise ImageBuildError(f"compiling the standard library failed: "
                              f"{(done.stdout + done.stderr).strip()[-800:]}")


def _entries(staging: Path, release: str, sources: dict[str, bytes], variant: str = "code"
             ) -> dict[str, imagefmt.Entry]:
    """Every file of the initramfs, by archive path. Debian 12 packages still ship /lib and
    /bin; the image is merged-/usr (those are symlinks into /usr)."""
    tree = imagefmt.Tree()
    for top in ("bin", "sbin", "lib", "lib64"):
        tree.symlink(top, f"usr/{top}")
    for directory in ("proc", "sys", "dev", "run", "root", "etc", "mnt"):
        tree.directory(directory)
    tree.directory("tmp", mode=0o1777)
    tree.directory("work", uid=SANDBOX_UID, gid=SANDBOX_UID)
    tree.node("dev/console", major=5, minor=1, mode=0o600)
    tree.node("dev/null", major=1, minor=3, mode=0o666)

    def merged(relative: str) -> str:
        first, _, rest = relative.partition("/")
        return f"usr/{relative}" if first in ("bin", "sbin", "lib", "lib64") and rest else relative

    # busybox and its applets (each a symlink, wherever busybox says it lives).
    busybox = staging / "bin" / "busybox"
    tree.file("usr/bin/busybox", busybox)
    listing = _run([str(busybox), "--list-full"])
    for applet in sorted(listing.split()):
        path = merged(applet)
        if path not in tree.entries:
            tree.symlink(path, "/usr/bin/busybox")

    # Python: the interpreter and the pruned, compiled standard library.
    tree.file("usr/bin/python3.11", staging / "usr/bin/python3.11")
    tree.symlink("usr/bin/python3", "python3.11")
    tree.add_dir_tree(staging, PYTHON_DIR)

    # Shared libraries: the DT_NEEDED closure of everything shipped, and nothing else.
    libdirs = [staging / "lib/x86_64-linux-gnu", staging / "usr/lib/x86_64-linux-gnu"]
    elves = [staging / "usr/bin/python3.11",
             *sorted((staging / PYTHON_DIR / "lib-dynload").glob("*.so"))]
    try:
        libraries = imagefmt.needed_closure(elves, libdirs)
    except LookupError as exc:
        raise ImageBuildError(str(exc)) from None
    for library in libraries:
        tree.library(merged(str(library.relative_to(staging))), library)
    tree.symlink("usr/lib64/ld-linux-x86-64.so.2", "/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2")
    tree.library("usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2",
                 staging / "lib/x86_64-linux-gnu/ld-linux-x86-64.so.2")

    # Kernel modules, flat, in the order init.sh loads them.
    module_root = staging / "lib" / "modules" / release
    for module in MODULES:
        tree.data(f"usr/lib/modules/{module}.ko", imagefmt.find_module(module_root, module))

    tree.data("init", sources["init.sh"], mode=0o755)
    tree.data("agent.py", sources["agent.py"], mode=0o644)
    tree.data("files.py", sources["files.py"], mode=0o644)
    tree.data("relay.py", sources["relay.py"], mode=0o644)
    tree.data("browser.py", sources["browser.py"], mode=0o644)
    passwd = [b"root:x:0:0:root:/root:/bin/sh", b"sandbox:x:1000:1000:sandbox:/work:/bin/sh"]
    group = [b"root:x:0:", b"sandbox:x:1000:"]
    if variant == "browser":
        try:
            browserimage.add_browser(tree, staging, libdirs)
        except LookupError as exc:
            raise ImageBuildError(f"browser image: {exc}") from None
        uid = browserimage.BROWSER_UID
        passwd.append(b"browser:x:%d:%d:browser:/home/browser:/bin/sh" % (uid, uid))
        group.append(b"browser:x:%d:" % uid)
    tree.data("etc/passwd", b"\n".join(passwd) + b"\n")
    tree.data("etc/group", b"\n".join(group) + b"\n")
    tree.data("etc/hostname", b"sandbox\n")
    return tree.entries
