"""Which kernel to run a session under, and on which backend: KVM, User-Mode Linux or software emulation.

``--tcpnet-kernel`` names a kernel (a vmlinuz path, a /boot release, a kernel line such as ``6.1`` or
``6.12``, or ``all``); a ``Target`` is what is installed for it: the qemu image of that release or line and
the User-Mode Linux build of its line. ``--tcpnet-vm-backend`` then picks how it boots (``choose``):
``auto`` takes KVM where a probe boot works (accel.py, cached), else UML where a build of the line is
installed, else software emulation (TCG); every choice carries the reason it was made.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Callable, Optional

from . import uml
from .errors import VMUsageError
from .kernel import (
    BOOT_DIR,
    INSTALL_HINT,
    MODULES_DIR,
    Kernel,
    has_module,
    installed_kernels,
    resolve_kernel,
    version_key,
)

BACKENDS = ("auto", "kvm", "uml", "tcg")


@dataclass(frozen=True)
class Target:
    """A kernel asked for, and what of it is installed: a qemu image, a UML build of its line, or both."""

    spec: str  # as given ("" for the default)
    line: str  # 6.1, 6.12
    image: Optional[Kernel] = None  # for KVM and TCG
    build: Optional[uml.UmlBuild] = None  # for User-Mode Linux

    def describe(self) -> str:
        have = [f"image {self.image.release}" if self.image else "", f"UML {self.build.release}" if self.build else ""]
        return f"kernel line {self.line} ({', '.join(h for h in have if h)})"


@dataclass(frozen=True)
class Choice:
    """The backend a target boots on, what it boots, and why that backend."""

    backend: str  # kvm | uml | tcg
    why: str
    target: Target

    @property
    def release(self) -> str:
        """The guest's `uname -r`."""
        return self.build.release if self.backend == "uml" else self.image.release

    @property
    def image(self) -> Kernel:
        assert self.target.image is not None
        return self.target.image

    @property
    def build(self) -> uml.UmlBuild:
        assert self.target.build is not None
        return self.target.build


def image_for_line(line: str, boot_dir: str = BOOT_DIR, modules_dir: str = MODULES_DIR) -> Kernel | None:
    """The newest /boot image of kernel line ``line`` with its modules installed, other than the running kernel."""
    running = os.uname().release
    images = [
        k
        for k in installed_kernels(boot_dir, modules_dir)
        if uml.kernel_line(k.release) == line and k.release != running
    ]
    return images[-1] if images else None


def resolve_target(
    spec: str | None, builds: list | None = None, boot_dir: str = BOOT_DIR, modules_dir: str = MODULES_DIR
) -> Target:
    """One ``--tcpnet-kernel`` value as a Target; raises only when nothing at all is installed for it."""
    builds = uml.installed_builds() if builds is None else builds
    spec = spec or ""
    if uml.is_line(spec):
        target = Target(spec, spec, image_for_line(spec, boot_dir, modules_dir), uml.find_build(spec, builds))
        if target.image is None and target.build is None:
            raise VMUsageError(
                f"--tcpnet-kernel={spec}: no kernel of line {spec} is installed, neither a qemu image in {boot_dir} "
                f"nor a User-Mode Linux build ({uml.SETUP_HINT}; for qemu, Debian: {INSTALL_HINT})"
            )
        return target
    by_binary = {b.binary: b for b in builds}
    if spec and os.path.realpath(spec) in by_binary:  # the path of a UML build's binary
        build = by_binary[os.path.realpath(spec)]
        return Target(spec, build.line, image_for_line(build.line, boot_dir, modules_dir), build)
    if not spec:
        try:
            image = resolve_kernel(None, boot_dir, modules_dir)
        except VMUsageError:
            if not builds:
                raise
            build = builds[-1]  # no qemu image at all: the newest UML build
            return Target(spec, build.line, None, build)
        return Target(
            spec, uml.kernel_line(image.release), image, uml.find_build(uml.kernel_line(image.release), builds)
        )
    image = resolve_kernel(spec, boot_dir, modules_dir)
    line = uml.kernel_line(image.release)
    return Target(spec, line, image, uml.find_build(line, builds))


def time_travel_target(specs, backend: str = "auto", builds: list | None = None) -> Target:
    """--tcpnet-deterministic's target: the time-travel UML build (dev/setup-uml-tt) of the one kernel line asked
    (default: the newest such build); an error naming the fix where there is none, before anything boots."""
    if backend not in ("auto", "uml"):
        raise VMUsageError(
            f"--tcpnet-deterministic runs under User-Mode Linux with time travel, not --tcpnet-vm-backend={backend}"
        )
    specs = [s for s in ([specs] if isinstance(specs, str) else specs or []) if s]
    if len(specs) > 1 or (specs and not uml.is_line(specs[0])):
        raise VMUsageError(
            f"--tcpnet-deterministic takes at most one --tcpnet-kernel, a kernel line (6.12), not {', '.join(specs)}"
        )
    builds = uml.installed_builds(time_travel=True) if builds is None else builds
    if specs:
        builds = [b for b in builds if b.line == specs[0]]
    if not builds:
        line = f" of kernel line {specs[0]}" if specs else ""
        raise VMUsageError(
            f"--tcpnet-deterministic: no User-Mode Linux build with time travel{line} is installed; build it with "
            f"{uml.TIME_TRAVEL_SETUP_HINT}"
        )
    build = builds[-1]
    return Target(specs[0] if specs else "", build.line, None, build)


def _netem(target: Target) -> bool:
    return bool(
        (target.image and has_module(target.image, "sch_netem"))
        or (target.build and uml.has_module(target.build, "sch_netem"))
    )


def resolve_targets(
    specs, builds: list | None = None, boot_dir: str = BOOT_DIR, modules_dir: str = MODULES_DIR
) -> list:
    """``--tcpnet-kernel`` given zero, one or more times, or ``all``: the checked targets, before any boot.

    ``all`` is every kernel line installed with sch_netem, as a qemu image or a UML build. With more than one
    target, each must have sch_netem (several kernels in one run are compared on netem paths) and no line
    may come twice.
    """
    builds = uml.installed_builds() if builds is None else builds
    if isinstance(specs, str):
        specs = [specs]
    specs = [s for s in (specs or []) if s]
    if "all" in specs:
        if len(specs) > 1:
            raise VMUsageError("--tcpnet-kernel=all already means every installed kernel: give it alone")
        lines = {
            uml.kernel_line(k.release)
            for k in installed_kernels(boot_dir, modules_dir)
            if has_module(k, "sch_netem") and k.release != os.uname().release
        }
        lines |= {b.line for b in builds if uml.has_module(b, "sch_netem")}
        if not lines:
            raise VMUsageError(
                f"--tcpnet-kernel=all: no kernel with sch_netem is installed, neither in {boot_dir} "
                f"({INSTALL_HINT}) nor as a User-Mode Linux build ({uml.SETUP_HINT})"
            )
        return [resolve_target(line, builds, boot_dir, modules_dir) for line in sorted(lines, key=version_key)]
    if len(specs) <= 1:
        return [resolve_target(specs[0] if specs else None, builds, boot_dir, modules_dir)]
    targets = [resolve_target(spec, builds, boot_dir, modules_dir) for spec in specs]
    seen: dict = {}
    for spec, target in zip(specs, targets):
        key = target.image.release if target.image and not uml.is_line(spec) else target.line
        if key in seen:
            raise VMUsageError(f"--tcpnet-kernel: {key} given twice ({seen[key]} and {spec})")
        seen[key] = spec
        if not _netem(target):
            raise VMUsageError(
                f"--tcpnet-kernel={spec}: {target.describe()} has no sch_netem; several kernels "
                "in one run are compared on netem paths"
            )
    return targets


def choose(requested: str, target: Target, kvm_probe: Callable[[], tuple[str, str]] | None = None) -> Choice:
    """The backend ``target`` boots on. ``kvm_probe()`` returns accel.choose_accel's ("kvm" | "tcg", reason)."""
    if requested not in BACKENDS:
        raise VMUsageError(f"--tcpnet-vm-backend must be one of {', '.join(BACKENDS)}, not {requested!r}")
    if requested == "uml":
        if target.build is None:
            uml.require_build(target.line)  # raises, naming what is installed and the fix
        return Choice("uml", "forced by --tcpnet-vm-backend=uml", target)
    if requested in ("kvm", "tcg"):
        if target.image is None:
            raise VMUsageError(
                f"--tcpnet-vm-backend={requested}: no qemu image of kernel line {target.line} in "
                f"{BOOT_DIR} (Debian: {INSTALL_HINT}); a User-Mode Linux build of it is installed: "
                "--tcpnet-vm-backend=uml or auto"
            )
        return Choice(requested, f"forced by --tcpnet-vm-backend={requested}", target)
    # auto
    kvm_why = "no qemu image of this line"
    if target.image is not None and kvm_probe is not None:
        accel, kvm_why = kvm_probe()
        if accel == "kvm":
            return Choice("kvm", f"auto: {kvm_why}", target)
    if target.build is not None:
        return Choice(
            "uml",
            f"auto: no KVM ({kvm_why}); a User-Mode Linux build of {target.line} is installed ({target.build.binary})",
            target,
        )
    if target.image is None:
        raise VMUsageError(f"no way to boot {target.describe()}")
    return Choice(
        "tcg",
        f"auto: no KVM ({kvm_why}) and no User-Mode Linux build of {target.line} "
        f"({uml.SETUP_HINT}): software emulation",
        target,
    )


def lines_installed(builds: list | None = None) -> dict:
    """{line: (qemu image or None, UML build or None)} for every installed kernel line (doctor)."""
    builds = uml.installed_builds() if builds is None else builds
    out: dict = {}
    for image in installed_kernels():
        if image.release != os.uname().release:
            out.setdefault(uml.kernel_line(image.release), [None, None])[0] = image
    for build in builds:
        out.setdefault(build.line, [None, None])[1] = build
    return {line: tuple(v) for line, v in sorted(out.items(), key=lambda kv: version_key(kv[0]))}


__all__ = [
    "BACKENDS",
    "Choice",
    "Target",
    "choose",
    "image_for_line",
    "lines_installed",
    "resolve_target",
    "resolve_targets",
    "time_travel_target",
]
