"""The ``browser`` variant of the guest image: the code image plus Debian's
``chromium-headless-shell`` (driven over the DevTools protocol by the browser tools), the
libraries it links and those it loads at run time, its resources, and a font with
fontconfig's configuration so text renders in screenshots.

Which packages is a fixed list (Debian 12 names), like the code image's: the binary's
``DT_NEEDED`` closure is computed from what was unpacked, so a library no listed package
ships fails the build by name; the libraries it ``dlopen``s and the resource files are
checked by name too."""

from __future__ import annotations

from pathlib import Path

from tenantry.sandbox.image import format as imagefmt

#: Packages whose files the browser needs besides libraries: the shell, its ICU data and V8
#: snapshots (chromium-common), a font, fontconfig's configuration.
PACKAGES = ("chromium-headless-shell", "chromium-common", "fonts-dejavu-core",
            "fontconfig-config")
#: The shared libraries of chromium-headless-shell's DT_NEEDED closure (Debian 12), those
#: the code image already has left out (build.LIB_PACKAGES).
LIB_PACKAGES = (
    "libasound2", "libasyncns0", "libatk1.0-0", "libatspi2.0-0", "libblkid1", "libbrotli1",
    "libbsd0", "libcap2", "libdav1d6", "libdbus-1-3", "libdouble-conversion3", "libdrm2",
    "libflac12", "libfontconfig1", "libfreetype6", "libgbm1", "libgcc-s1", "libgcrypt20",
    "libglib2.0-0", "libgpg-error0", "libgraphite2-3", "libharfbuzz-subset0",
    "libharfbuzz0b", "libjpeg62-turbo", "liblcms2-2", "liblz4-1", "libmd0", "libminizip1",
    "libmount1", "libmp3lame0", "libmpg123-0", "libnspr4", "libnss3", "libogg0",
    "libopenh264-7", "libopenjp2-7", "libopus0", "libpcre2-8-0", "libpng16-16", "libpulse0",
    "libselinux1", "libsndfile1", "libstdc++6", "libsystemd0", "libudev1", "libvorbis0a",
    "libvorbisenc2", "libwayland-server0", "libx11-6", "libx11-xcb1", "libxau6", "libxcb1",
    "libxcomposite1", "libxdamage1", "libxdmcp6", "libxext6", "libxfixes3", "libxi6",
    "libxkbcommon0", "libxnvctrl0", "libxrandr2", "libxrender1", "libzstd1",
)
CHROMIUM_DIR = "usr/lib/chromium"
BINARY = f"{CHROMIUM_DIR}/chromium-headless-shell"
#: Resource files read next to the binary: the shell's own .pak files (every headless_*.pak;
#: chromium-common's resources.pak and chrome_*_percent.pak are the full browser's, 21 MB
#: the shell does not read), ICU's data and V8's start-up snapshots from chromium-common.
RESOURCES = ("icudtl.dat", "snapshot_blob.bin", "v8_context_snapshot.bin")
LIBDIR = "usr/lib/x86_64-linux-gnu"
#: Libraries NSS loads with dlopen (no DT_NEEDED names them): its software token and
#: crypto (TLS fails without them) and the built-in root certificates.
DLOPENED = ("libsoftokn3.so", "libfreeblpriv3.so", "libnssckbi.so", "libnssdbm3.so")
#: Directories libraries are looked up in besides the usual two: libpulse's private
#: library (its RUNPATH).
EXTRA_LIBDIRS = (f"{LIBDIR}/pulseaudio",)
#: fontconfig's defaults, linked into /etc/fonts/conf.d as Debian's maintainer scripts do
#: (the .deb ships them in conf.avail only); plus every conf.avail file of the font package.
FONTCONFIG_DEFAULTS = (
    "10-hinting-slight.conf", "10-scale-bitmap-fonts.conf", "10-yes-antialias.conf",
    "11-lcdfilter-default.conf", "30-metric-aliases.conf", "40-nonlatin.conf",
    "45-generic.conf", "45-latin.conf", "48-spacing.conf", "49-sansserif.conf",
    "60-generic.conf", "60-latin.conf", "65-nonlatin.conf", "70-no-bitmaps.conf",
    "90-synthetic.conf",
)
FONT_DIR = "usr/share/fonts/truetype/dejavu"
#: The user the agent runs Chromium as: not the code's uid (1000), so killing the code's
#: processes after each execution leaves the browser running.
BROWSER_UID = 1001


class MissingBrowserFile(LookupError):
    """A file the browser needs is in none of the variant's packages."""


def add_browser(tree: imagefmt.Tree, staging: Path, libdirs: list[Path]) -> None:
    """Add the browser's files from the unpacked packages in ``staging`` to ``tree``
    (merged-/usr paths, like the code image's)."""

    def need(relative: str) -> Path:
        path = staging / relative
        if not path.exists():
            raise MissingBrowserFile(f"{relative} is in none of the browser image's packages")
        return path

    binary = need(BINARY)
    tree.file(BINARY, binary)
    tree.symlink("usr/bin/chromium-headless-shell", f"/{BINARY}")
    paks = sorted(binary.parent.glob("headless_*.pak"))
    if not paks:
        raise MissingBrowserFile(f"no headless_*.pak in {CHROMIUM_DIR}")
    for pak in paks:
        tree.file(f"{CHROMIUM_DIR}/{pak.name}", pak)
    for name in RESOURCES:
        tree.file(f"{CHROMIUM_DIR}/{name}", need(f"{CHROMIUM_DIR}/{name}"))

    dlopened = [need(f"{LIBDIR}/{name}") for name in DLOPENED]
    search = [*libdirs, *(staging / extra for extra in EXTRA_LIBDIRS)]
    for library in imagefmt.needed_closure([binary, *dlopened], search):
        tree.library(_merged(str(library.relative_to(staging))), library)
    for library in dlopened:
        tree.library(str(library.relative_to(staging)), library)

    fonts = sorted(need(FONT_DIR).glob("*.ttf"))
    if not fonts:
        raise MissingBrowserFile(f"no font in {FONT_DIR}")
    for font in fonts:
        tree.file(str(font.relative_to(staging)), font)
    tree.file("etc/fonts/fonts.conf", need("etc/fonts/fonts.conf"))
    tree.directory("etc/fonts/conf.d")
    for name in FONTCONFIG_DEFAULTS:
        conf = need(f"usr/share/fontconfig/conf.avail/{name}")
        tree.file(f"usr/share/fontconfig/conf.avail/{name}", conf)
        tree.symlink(f"etc/fonts/conf.d/{name}", f"/usr/share/fontconfig/conf.avail/{name}")
    for conf in sorted(need("etc/fonts/conf.avail").glob("*.conf")):
        tree.file(f"etc/fonts/conf.avail/{conf.name}", conf)
        tree.symlink(f"etc/fonts/conf.d/{conf.name}", f"/etc/fonts/conf.avail/{conf.name}")
    tree.directory("var/cache/fontconfig", mode=0o1777)
    tree.directory("home/browser", uid=BROWSER_UID, gid=BROWSER_UID)


def _merged(relative: str) -> str:
    first, _, rest = relative.partition("/")
    return f"usr/{relative}" if first in ("bin", "sbin", "lib", "lib64") and rest else relative
