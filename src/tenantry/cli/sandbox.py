"""``tenantry sandbox``: the guest images, and which sandbox backends work on this host."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from tenantry.cli.common import fail, settings
from tenantry.cli.help import App
from tenantry.cli.options import DataDir, ImageDir, MinBoundary

if TYPE_CHECKING:
    from rich.progress import TaskID

sandbox_app = App(help="Sandboxes for model-written code.")


@sandbox_app.command("build-image")
def sandbox_build_image(
    data_dir: DataDir = None,
    image_dir: ImageDir = None,
    variant: Annotated[str, typer.Option(
        "--variant", help="Which image: code (code execution), browser (code execution "
        "and a headless Chromium), or all.")] = "all",
) -> None:
    """Build the microVM guest images (kernel + root file system) from Debian packages: the
    code image, and the browser image (the same plus Debian's chromium-headless-shell).

    Reproducible and cached: a no-op when the image for these package versions and this
    guest agent exists. Only this step downloads (through apt); sandboxes never do."""
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from tenantry.sandbox.image import build_image
    from tenantry.sandbox.image.build import VARIANTS
    from tenantry.sandbox.types import SandboxError

    if variant not in (*VARIANTS, "all"):
        fail(f"--variant must be one of {', '.join(VARIANTS)} or all, got {variant!r}")
    config = settings(data_dir=data_dir, sandbox_image_dir=image_dir)
    built = []
    with Progress(TextColumn("{task.description}"), BarColumn(), TimeElapsedColumn(),
                  transient=False) as bar:
        for name in VARIANTS if variant == "all" else (variant,):
            task = bar.add_task(f"{name} image", total=1.0)

            def show(step: str, done: float, task: TaskID = task, name: str = name) -> None:
                bar.update(task, description=f"{name} image: {step}", completed=done)

            try:
                built.append((name, build_image(config.sandbox_dir, progress=show,
                                                variant=name)))
            except SandboxError as exc:
                fail(exc.detail)
            bar.update(task, description=f"{name} image ready", completed=1.0)
    for name, image in built:
        typer.echo(f"{name} image {image.digest[:16]}: {image.kernel} + {image.initramfs}")


@sandbox_app.command("probe")
def sandbox_probe(data_dir: DataDir = None, min_boundary: MinBoundary = None) -> None:
    """Which sandbox backends work on this host, the boundary a worker would get (with what
    it runs without here) and whether it meets the minimum."""
    from tenantry.sandbox.backends.microvm import kvm_usable
    from tenantry.sandbox.probe import CONFINEMENT, boundary

    config = settings(data_dir=data_dir, sandbox_min_boundary=min_boundary)
    found = boundary(config)
    for name in ("microvm", "gvisor", "bwrap"):
        reason = found.why_not.get(name)
        mark = "ok " if reason is None else "no "
        extra = ""
        if name == "microvm" and reason is None:
            extra = " (-accel kvm)" if kvm_usable() else " (software CPU emulation: no usable KVM)"
        if name == "bwrap" and reason is None:
            extra = " (development only: shares the host kernel)"
        typer.echo(f"{mark} {name}{extra}{'' if reason is None else ': ' + reason}")
    how = "configured" if found.configured else "probed"
    typer.echo(f"boundary in force: {found.label} ({how})")
    if found.backend is not None:
        typer.echo(f"confinement: {CONFINEMENT[found.backend]}")
        typer.echo("degradations: " + (", ".join(found.degradations) or "none"))
    minimum = config.sandbox_min_boundary
    if found.weaker_than(minimum):
        typer.echo(f"minimum TENANTRY_SANDBOX_MIN_BOUNDARY={minimum}: NOT met; `tenantry "
                   "worker` refuses to start, `tenantry up` starts with a warning")
    else:
        typer.echo(f"minimum TENANTRY_SANDBOX_MIN_BOUNDARY={minimum}: met")
