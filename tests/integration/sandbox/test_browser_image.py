"""The microVM's browser image: the code image plus Debian's chromium-headless-shell, built
by the same command from Debian packages. Booted for real, with Chromium driven inside it by
the browser tools: tests/integration/sandbox/test_browser.py (its microvm cases)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from tenantry.config import Settings
from tenantry.sandbox import probe
from tenantry.sandbox.backends.microvm_host import QEMU_BINARY, QEMU_PACKAGE
from tenantry.sandbox.image.build import ImageInfo, _prune, build_image
from tenantry.sandbox.types import Limits, SandboxUnavailable
from tests.support.sandbox import placeholder_image_dir, sandbox_settings

#: The default process cap (128, RLIMIT_NPROC: threads count) is enough for one Chromium;
#: under emulation its start takes ~30 s.
LIMITS = Limits(memory_mib=1536, timeout_s=180)
CHROMIUM = ["/usr/bin/chromium-headless-shell", "--headless", "--no-sandbox", "--disable-gpu",
            "--disable-dev-shm-usage", "--user-data-dir=/tmp/p"]
PAGE = "data:text/html,<title>t</title><p>hello browser</p>"


@pytest.fixture(scope="module")
def images(tmp_path_factory: pytest.TempPathFactory) -> dict[str, ImageInfo]:
    """Both variants, where `make image` builds them (a no-op when built)."""
    if shutil.which(QEMU_BINARY) is None:
        pytest.fail(f"microvm tests need {QEMU_BINARY}: install the Debian package "
                    f"{QEMU_PACKAGE} (scripts/install-system-packages does)")
    cache = sandbox_settings(Path("/nonexistent"), "microvm").sandbox_dir
    return {variant: build_image(cache, variant=variant) for variant in ("code", "browser")}


def test_browser_image_holds_chromium_nss_and_fonts_and_the_code_image_does_not(
        images: dict[str, ImageInfo]) -> None:
    code, browser = images["code"], images["browser"]
    assert code.digest != browser.digest
    assert code.initramfs != browser.initramfs and code.kernel.read_bytes()[:4] == b"\x7fELF"
    files = set(browser.manifest["files"])
    for path in ("usr/lib/chromium/chromium-headless-shell", "usr/bin/chromium-headless-shell",
                 "usr/lib/chromium/icudtl.dat", "usr/lib/x86_64-linux-gnu/libsoftokn3.so",
                 "usr/lib/x86_64-linux-gnu/libfreeblpriv3.so", "etc/fonts/fonts.conf",
                 "usr/share/fonts/truetype/dejavu/DejaVuSans.ttf", "usr/bin/python3.11",
                 "agent.py"):
        assert path in files, path
    assert set(code.manifest["files"]) < files  # everything the code image has, and more
    assert not [f for f in code.manifest["files"] if "chromium" in f or "fonts" in f]
    # The browser's own user (the agent runs Chromium as it, apart from the code's uid).
    assert b"\nbrowser:x:1001:1001:" in _member(browser.initramfs, "etc/passwd")
    assert b"browser" not in _member(code.initramfs, "etc/passwd")


def test_no_browser_image_built_is_said_with_the_command_to_run(tmp_path: Path) -> None:
    """A host with only the code image: the code variant's backend is there, the browser
    variant's is unavailable, in one line naming what to run."""
    settings = Settings(data_dir=tmp_path, sandbox_image_dir=placeholder_image_dir(tmp_path))
    with pytest.raises(SandboxUnavailable,
                       match=r"no browser guest image; run `tenantry sandbox build-image "
                             r"--variant browser`"):
        probe.build_backend("microvm", settings, variant="browser")


def test_building_one_variant_never_prunes_the_others_current_image(tmp_path: Path) -> None:
    """Each variant keeps its current image and the one before it; a third code build drops
    only the oldest code image, never the browser's."""
    images = tmp_path / "images"
    for number, variant in enumerate(("browser", "browser", "code", "code", "code")):
        folder = images / f"image{number}"
        folder.mkdir(parents=True)
        (folder / "manifest.json").write_text(json.dumps({"variant": variant}))
        os.utime(folder, (number, number))
    (images / "current-browser").write_text("image0\n")  # the older browser image
    (images / "current").write_text("image4\n")
    _prune(tmp_path, "current", "image4", debs_kept={})
    assert sorted(p.name for p in images.iterdir() if p.is_dir()) == [
        "image0", "image1", "image3", "image4"]


def _member(archive: Path, name: str) -> bytes:
    """One file of a newc cpio archive (the initramfs), read by walking its headers."""
    with archive.open("rb") as handle:
        while True:
            header = handle.read(110)
            size, name_size = int(header[54:62], 16), int(header[94:102], 16)
            path = handle.read(name_size)[:-1].decode()
            handle.read((4 - (110 + name_size) % 4) % 4)
            if path == "TRAILER!!!":
                raise KeyError(name)
            if path == name:
                return handle.read(size)
            handle.seek(size + (4 - size % 4) % 4, 1)
