"""The microVM guest image (ADR 0005): how it is built from Debian packages (``build``)
and the formats it is written in — cpio, ELF, the kernel's compressed payload
(``format``). The guest's own files live in ``sandbox/guest/``."""

from tenantry.sandbox.image.build import ImageInfo, build_image, find_image

__all__ = ["ImageInfo", "build_image", "find_image"]
