"""``python -m pytest_tcpnet doctor``: what this machine can do for pytest-tcpnet, and the command that fixes each gap.

It reads; it changes nothing (no cache written, nothing installed) and boots nothing longer than one
probe: each User-Mode Linux build starts and powers off (a few seconds: docs/vm.md), and where /dev/kvm is usable and no
earlier probe is cached, one qemu guest is started under KVM with a short deadline.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

__all__ = ["main", "report"]

OK, MISSING = "ok", "MISSING"


def _line(state: str, what: str, detail: str = "", fix: str = "") -> str:
    text = f"  [{state:^7}] {what}" + (f": {detail}" if detail else "")
    return text + (f"\n            fix: {fix}" if fix else "")


def _privilege() -> list:
    from . import netlink, rootless

    if netlink.has_net_admin():
        return [_line(OK, "privilege", "root (CAP_NET_ADMIN): labs build in network namespaces directly")]
    blocker = rootless.userns_blocker()
    if blocker is None:
        return [_line(OK, "privilege", "not root; unprivileged user namespaces work: sessions re-run rootless")]
    return [
        _line(
            MISSING,
            "privilege",
            f"not root, and rootless labs are impossible: {blocker}",
            "run as root, or allow unprivileged user namespaces as said",
        )
    ]


def _host_kernel() -> list:
    from . import netlink
    from .requirements import ACTION_NEEDS, QDISC_NEEDS

    release = os.uname().release
    if not netlink.has_net_admin():
        return [_line("?", f"host kernel {release}", "qdiscs can be probed only as root")]
    kinds = sorted(QDISC_NEEDS | ACTION_NEEDS)
    have = [k for k in kinds if netlink.qdisc_supported(k)]
    lacking = [k for k in kinds if k not in have]
    ccs = " ".join(sorted(netlink.available_congestion_controls()))
    out = [_line(OK, f"host kernel {release}", f"qdiscs/actions: {' '.join(have)}; congestion controls: {ccs}")]
    if lacking:
        out.append(
            _line(
                "note",
                "not in the host kernel",
                " ".join(lacking),
                "tests that need them run under --tcpnet-vm (a kernel line below that has them)",
            )
        )
    return out


def _tools() -> list:
    from .errors import program_path
    from .requirements import TOOL_NEEDS

    out = []
    for tool, package in sorted(TOOL_NEEDS.items()):
        try:
            out.append(_line(OK, tool, program_path(tool, package=package)))
        except Exception:  # MissingCapability, whatever the tool
            out.append(_line(MISSING, tool, "not found", f"apt-get install {package}"))
    return out


def _probe_uml(build) -> str:
    """Boot the build with a trivial init; "booted in N s" or why not."""
    import secrets

    from .vm import fastboot, uml
    from .vm.launch import launch

    workdir = tempfile.mkdtemp(prefix="tcpnet-doctor-")
    try:
        sentinel = f"TCPNET-DOCTOR-{secrets.token_hex(6)}"
        init = os.path.join(workdir, "init.sh")
        with open(init, "w", encoding="utf-8") as f:
            f.write(uml.guest_init(f"echo {sentinel}\nuname -r\n", build, [], [], fastboot.find_busybox()))
        os.chmod(init, 0o755)
        os.makedirs(os.path.join(workdir, "memory"))
        cmd = uml.command(build, "256M", init, os.path.join(workdir, "uml"), f"tcpnet-doctor-{secrets.token_hex(4)}")
        started = time.monotonic()
        result = launch(
            cmd,
            cwd=workdir,
            sentinel=sentinel.encode(),
            boot_timeout=20,
            echo=False,
            after_start_timeout=10,
            cleanup=workdir,
            env={"TMPDIR": os.path.join(workdir, "memory")},
        )
        if result.started:
            return f"boots ({time.monotonic() - started:.1f} s to power-off)"
        return f"does NOT boot: {(result.tail or ['no output'])[-1]}"
    except Exception as exc:  # a doctor reports, it does not crash
        return f"does NOT boot: {type(exc).__name__}: {exc}"
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def _uml_line(build, what: str, modules: str, fix: str) -> str:
    """A doctor line for one User-Mode Linux build: booted once here, or why not and how to set it up."""
    booted = _probe_uml(build)
    boots = booted.startswith("boots")
    detail = f"{build.binary}, {modules}; {booted}" if modules else f"{build.binary}; {booted}"
    return _line(OK if boots else MISSING, what, detail, "" if boots else fix)


def _kvm() -> tuple[list, bool]:
    from .vm import accel

    usable, why_not = accel.kvm_usable()
    if not usable:
        return [
            _line(
                "no",
                "KVM",
                why_not,
                "a host with hardware virtualisation (GitHub's x64 runners have it); "
                "without it UML (below) runs at host speed",
            )
        ], False
    cached = []
    try:
        import json

        data = json.loads(accel.cache_path().read_text(encoding="utf-8"))
        cached = [v for v in data.values() if isinstance(v, dict) and v.get("accel") in ("kvm", "tcg")]
    except (OSError, ValueError):
        pass
    if cached:
        last = max(cached, key=lambda v: v.get("when", ""))
        works = last["accel"] == "kvm"
        return [
            _line(
                OK if works else "no",
                "KVM",
                f"{'works' if works else 'does not boot a guest'}: "
                f"{last['reason']} (cached {last['when']} in {accel.cache_path()})",
            )
        ], works
    works, detail = _probe_kvm()
    return [
        _line(
            OK if works else "no",
            "KVM",
            f"{'works' if works else 'does not boot a guest'}: {detail} (probed now, not cached)",
        )
    ], works


def _probe_kvm() -> tuple[bool, str]:
    """One trivial KVM boot of the newest qemu image, the way auto probes it; nothing cached."""
    from .vm import fastboot, kernel
    from .vm.errors import VMError
    from .vm.runner import ProbeTools, find_tools, kvm_probe_boot

    vng, qemu = find_tools()
    if qemu is None:
        return False, "no qemu to probe it with"
    scratch = tempfile.mkdtemp(prefix="tcpnet-doctor-")  # fast boot's derived files: not into the user's cache
    try:
        image = kernel.default_kernel()
        try:
            boot = fastboot.FastBoot(
                fastboot.vmlinux_for(image, Path(scratch)), fastboot.initramfs_for(image, Path(scratch))
            )
        except (fastboot.Unavailable, OSError, ValueError, ImportError):
            boot = None
        plan = ProbeTools(qemu=qemu, vng=vng, kernel=image)
        started = time.monotonic()
        worked, why = kvm_probe_boot(plan, 25.0, boot)
    except VMError as exc:
        return False, str(exc)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return worked, (f"a trivial guest reached its command in {time.monotonic() - started:.1f} s" if worked else why)


def _kernels(kvm_works: bool) -> list:
    from .vm import backend, kernel, uml
    from .vm.runner import find_vng, qemu_hint, qemu_name

    qemu = shutil.which(qemu_name())
    out = []
    if not qemu:
        out.append(
            _line("no", "qemu", "not installed: KVM and TCG backends unavailable", qemu_hint().split(": ", 1)[1])
        )
    lines = backend.lines_installed()
    if not lines:
        out.append(
            _line(
                MISSING,
                "kernels for --tcpnet-vm",
                "none installed",
                f"{uml.SETUP_HINT}; or, for qemu, {kernel.INSTALL_HINT}",
            )
        )
    for line, (image, build) in lines.items():
        if image is not None:
            netem = "sch_netem" if kernel.has_module(image, "sch_netem") else "NO sch_netem"
            ways = ("TCG" + (" and KVM" if kvm_works else "") + " (not booted here)") if qemu else "nothing (no qemu)"
            out.append(
                _line(
                    OK if qemu else MISSING,
                    f"kernel line {line}: qemu image {image.release}",
                    f"{image.path}, {netem}; boots on {ways}",
                )
            )
        if build is not None:
            netem = "sch_netem" if uml.has_module(build, "sch_netem") else "NO sch_netem"
            out.append(_uml_line(build, f"kernel line {line}: User-Mode Linux {build.release}", netem, uml.SETUP_HINT))
        elif line in ("6.1", "6.12"):
            out.append(_line(MISSING, f"kernel line {line}: User-Mode Linux", "not installed", uml.SETUP_HINT))
    for line in ("6.1", "6.12"):
        if line not in lines:
            out.append(_line(MISSING, f"kernel line {line}", "neither a qemu image nor a UML build", uml.SETUP_HINT))
    travelling = uml.installed_builds(time_travel=True)
    for build in travelling:
        what = f"--tcpnet-deterministic: User-Mode Linux {build.release} with time travel"
        out.append(_uml_line(build, what, "", uml.TIME_TRAVEL_SETUP_HINT))
    if not travelling:
        out.append(
            _line(
                MISSING,
                "--tcpnet-deterministic",
                "no User-Mode Linux build with time travel",
                uml.TIME_TRAVEL_SETUP_HINT,
            )
        )
    if qemu and not find_vng():
        out.append(
            _line(
                "note",
                "vng",
                "not installed: kernels fast boot cannot start have no fallback",
                "pip install 'pytest-tcpnet[vm]'",
            )
        )
    return out


def report() -> str:
    """The whole report, as text."""
    sections = [("this machine", _privilege() + _host_kernel()), ("tools", _tools())]
    kvm, kvm_works = _kvm()
    sections.append(
        ("kernels for --tcpnet-vm (--tcpnet-vm-backend=auto: KVM, else UML, else TCG)", kvm + _kernels(kvm_works))
    )
    text = [f"pytest-tcpnet doctor ({sys.executable}, Python {sys.version.split()[0]})"]
    for title, lines in sections:
        text += ["", title] + lines
    return "\n".join(text)


def main(argv: list | None = None) -> int:
    """Print the report; exit 0 (a doctor's findings are not an error)."""
    print(report())
    return 0
