"""Re-running a pytest invocation inside a VM (qemu under KVM or TCG, or User-Mode Linux) and returning its exit code."""

from __future__ import annotations

import compileall
import json
import os
import platform
import re
import secrets
import shlex
import shutil
import sys
import tempfile
from dataclasses import dataclass, field, replace
from functools import partial

from .. import guest
from ..hostload import CONTENTION_WARNING_CORES, HostContention, idle_cpus_polling
from ..report.artifacts import artifacts_root
from . import ACCEL_ENV, IN_VM_ENV, console, fastboot, hostcall, uml
from . import backend as backends
from .accel import choose_accel
from .args import artifact_dirs, check_shareable, guest_environment, share_dirs, strip_vm_args
from .console import say
from .errors import EXIT_INTERNAL_ERROR, EXIT_INTERRUPTED, VMError, VMUsageError
from .kernel import Kernel, has_module
from .launch import LaunchResult, launch
from .lock import VMLock
from .options import BACKEND_CHOICES

# Loaded in the guest before pytest starts; the labs need them and the Debian kernel has
# them as modules. A failure is reported, not fatal: a test that needs one fails clearly.
GUEST_MODULES = (
    "sch_netem",
    "sch_htb",
    "sch_tbf",
    "sch_fq",
    "sch_fq_codel",
    "sch_prio",
    "sch_sfq",
    "sch_codel",
    "sch_cake",
    "sch_pie",
    "sch_fq_pie",
    "sch_red",
    "sch_ingress",
    "cls_u32",
    "cls_bpf",
    "cls_matchall",
    "act_mirred",
    "act_police",
    "ifb",
    "veth",
    "tcp_bbr",
    "tcp_dctcp",
    # Built into Debian's amd64 kernels, a module in its UML builds (their guests have no /proc/net/tcp6 without it).
    "ipv6",
)
# Kernel console verbosity in the guest once our command runs: errors and worse, like the
# kernel's own "quiet". The boot log before it is kept for error messages only.
GUEST_PRINTK_LEVEL = 4
QEMU_PACKAGE = {"x86_64": "qemu-system-x86", "aarch64": "qemu-system-arm"}
_MEMORY = re.compile(r"^[0-9]+[KMGT]?$", re.IGNORECASE)


@dataclass
class Plan:
    """Everything needed to run the session in a VM, resolved and checked on the host."""

    vng: str | None
    qemu: str | None
    target: backends.Target
    backend: str  # requested: auto | kvm | uml | tcg
    cpus: int
    memory: str
    boot_timeout: float
    lock_timeout: float
    cwd: str
    python: str
    pytest_args: list
    env: dict
    shares: list  # host dirs shared read-write (cwd first)
    code: list = field(default_factory=list)  # host dirs the session imports from (fast boot: cached, read-only)
    modules: tuple = GUEST_MODULES
    echo_boot: bool = False
    warnings: list = field(default_factory=list)

    @property
    def kernel(self) -> Kernel:
        """The qemu image to boot (KVM, TCG)."""
        assert self.target.image is not None, "no qemu image for this target"
        return self.target.image


#: What to install for vng, the fallback when fast boot cannot boot a kernel.
VNG_HINT = "virtme-ng's `vng`: pip install virtme-ng (or pip install 'pytest-tcpnet[vm]')"


def find_vng() -> str | None:
    """virtme-ng's ``vng``: on PATH, or beside this interpreter (a virtualenv used without activating it)."""
    beside = os.path.join(os.path.dirname(sys.executable), "vng")
    return shutil.which("vng") or (beside if os.access(beside, os.X_OK) else None)


def qemu_name() -> str:
    machine = platform.machine()
    return f"qemu-system-{'x86_64' if machine == 'x86_64' else machine}"


def qemu_hint() -> str:
    return f"{qemu_name()}: apt-get install {QEMU_PACKAGE.get(platform.machine(), 'qemu-system')}"


def find_tools() -> tuple[str | None, str | None]:
    """Return the paths of ``vng`` (None if absent: fast boot does without it) and of qemu (None if absent: User-Mode
    Linux does without it)."""
    return find_vng(), shutil.which(qemu_name())


def _number_option(config, name: str, flag: str, minimum: float):
    value = config.getoption(name)
    if value is None or value < minimum:
        raise VMUsageError(f"{flag} must be at least {minimum}, not {value!r}")
    return value


def _test_path_dirs(config, cwd: str) -> list:
    """The directories of the test paths pytest was given: the guest sees the host's root read-only, but
    not its /tmp (fast boot mounts a fresh one), so a path there must be shared to be found at all."""
    dirs = []
    for arg in getattr(config, "args", None) or ():
        path = os.path.join(cwd, str(arg).split("::")[0])
        if os.path.exists(path):
            dirs.append(path if os.path.isdir(path) else os.path.dirname(path))
    return dirs


def _cache_dir(config) -> str | None:
    """pytest's cache directory (cache_dir, relative to the rootdir) when the cacheprovider plugin is on."""
    if not config.pluginmanager.hasplugin("cacheprovider"):
        return None
    chosen = os.path.expandvars(os.path.expanduser(config.getini("cache_dir")))
    return os.path.join(str(config.rootpath), chosen)


def _check_baseline(config) -> None:
    """A baseline to compare with must be readable and valid before any VM boots."""
    path = config.getoption("tcpnet_baseline", default=None)
    if not path or config.getoption("tcpnet_baseline_mode", default="compare") != "compare":
        return
    from ..report.baseline import load_baseline

    try:
        load_baseline(os.path.join(str(config.invocation_params.dir), path))
    except (OSError, ValueError) as exc:
        raise VMUsageError(f"--tcpnet-baseline={path}: {exc}") from None


def plan_from_config(config, target: backends.Target | None = None) -> Plan:
    """Resolve the options of a pytest ``config`` into a checked ``Plan`` (no VM started) for ``target`` (default:
    the one ``--tcpnet-kernel`` names)."""
    vng, qemu = find_tools()
    if target is None:
        spec = config.getoption("tcpnet_vm_kernel")
        target = backends.resolve_target(spec[-1] if isinstance(spec, list) and spec else spec or None)
    requested = config.getoption("tcpnet_vm_backend")
    if requested not in BACKEND_CHOICES:
        raise VMUsageError(f"--tcpnet-vm-backend must be one of {', '.join(BACKEND_CHOICES)}, not {requested!r}")
    if requested != "auto":
        backends.choose(requested, target)  # a forced backend that cannot boot this target: said before anything
    if requested in ("kvm", "tcg") and qemu is None:
        raise VMUsageError(f"--tcpnet-vm-backend={requested} needs {qemu_hint()}")
    if target.image is None and target.build is None:
        raise VMUsageError(f"nothing installed boots {target.describe()}")
    if requested == "auto" and qemu is None and target.build is None:
        raise VMUsageError(
            f"--tcpnet-vm needs {qemu_hint()}, or a User-Mode Linux build of {target.line} ({uml.SETUP_HINT})"
        )
    if requested == "uml" and target.build is not None and not uml.has_module(target.build, "sch_netem"):
        raise VMUsageError(
            f"the User-Mode Linux build {target.build.binary} ({target.build.release}) has no sch_netem "
            f"in {target.build.modules}: reinstall it ({uml.SETUP_HINT})"
        )
    if target.image is not None:
        check_shareable(target.image.path, "the kernel image")
    if target.build is not None:
        check_shareable(target.build.binary, "the User-Mode Linux binary")
    _check_baseline(config)
    memory = str(config.getoption("tcpnet_vm_memory"))
    if not _MEMORY.match(memory):
        raise VMUsageError(f"--tcpnet-vm-memory must look like 2G or 1536M, not {memory!r}")

    params = config.invocation_params
    cwd = os.path.realpath(str(params.dir))
    wanted = artifact_dirs(
        cwd,
        xmlpath=config.getoption("xmlpath", default=None),
        basetemp=config.getoption("basetemp", default=None),
        # Resolved as the session does, default included: tcpnet-artifacts/ under the rootdir, which
        # may be above the working directory (test paths elsewhere, no configuration file).
        artifacts=str(artifacts_root(config)) if config.pluginmanager.hasplugin("tcpnet") else None,
        cache_dir=_cache_dir(config),
        # Other plugins' report files, when those plugins are installed.
        report_files=[
            f
            for f in (
                config.getoption("report_log", default=None),
                config.getoption("htmlpath", default=None),
                config.getoption("tcpnet_results", default=None),
                config.getoption("tcpnet_baseline", default=None),
            )
            if f
        ],
    )
    for d in wanted:
        os.makedirs(d, exist_ok=True)  # a share must exist on the host before boot
    # The session's virtualenv and this package's checkout (an editable install): the guest runs
    # that interpreter and imports this code, and fast boot gives the guest a /tmp of its own, so
    # either under the host's /tmp would not be there otherwise.
    package_dir = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))
    package_root = os.path.dirname(package_dir)
    venv = [os.path.realpath(sys.prefix)] if sys.prefix != sys.base_prefix else []
    wanted = list(wanted) + [package_root] + venv + _test_path_dirs(config, cwd)
    shares = [check_shareable(d, "directory") for d in share_dirs(cwd, wanted)]
    # Under fast boot the shares are uncached (the host reads what the guest writes), and every
    # import over an uncached 9p mount costs round trips under emulation: the code the session
    # imports is seen read-only through the cached root instead, with its bytecode compiled here.
    # TCPNET_VM_CACHED_CODE=0: import it over the uncached shares, as before (slower, same results).
    code = []
    if os.environ.get("TCPNET_VM_CACHED_CODE") != "0":
        code = [check_shareable(d, "directory") for d in venv + [package_dir]]
        compile_bytecode(package_dir)

    warnings = []
    if target.image is not None and target.build is None and not has_module(target.image, "sch_netem"):
        warnings.append(f"kernel {target.image.release} has no sch_netem in {target.image.modules}")
    extra_env = {IN_VM_ENV: "1"}
    if not any(k in os.environ for k in ("PY_COLORS", "NO_COLOR")):
        # The guest's stdout is a virtio port (qemu) or a console (UML), whatever the host's is: colours as here.
        extra_env["PY_COLORS"] = "1" if sys.stdout.isatty() else "0"
    if sys.stdout.isatty():
        if "COLUMNS" not in os.environ:
            extra_env["COLUMNS"] = str(shutil.get_terminal_size().columns)
    extra_modules = (os.environ.get("TCPNET_VM_MODULES") or "").replace(",", " ").split()
    return Plan(
        vng=vng,
        qemu=qemu,
        target=target,
        backend=requested,
        cpus=_number_option(config, "tcpnet_vm_cpus", "--tcpnet-vm-cpus", 1),
        memory=memory,
        boot_timeout=_number_option(config, "tcpnet_vm_boot_timeout", "--tcpnet-vm-boot-timeout", 0.1),
        lock_timeout=_number_option(config, "tcpnet_vm_lock_timeout", "--tcpnet-vm-lock-timeout", 0),
        cwd=cwd,
        python=sys.executable,
        pytest_args=strip_vm_args(list(params.args)),
        env=guest_environment(os.environ, extra_env),
        shares=shares,
        code=code,
        modules=GUEST_MODULES + tuple(m for m in extra_modules if m not in GUEST_MODULES),
        echo_boot=os.environ.get("TCPNET_VM_DEBUG") == "1",
        warnings=warnings,
    )


#: The emulator's nice value: the VM is the measuring instrument, and under software emulation its
#: links run only while its CPUs do, so beside a CPU hog at nice 0 the guest's shaped links lost
#: much of their rate (docs/vm.md, "A busy host: the emulator's priority"); at -10 its threads
#: outweigh a nice-0 process 9:1.
#: Only root may raise a priority; rootless, the emulator keeps the launcher's. $TCPNET_VM_NICE
#: overrides it (0: the launcher's priority).
EMULATOR_NICE = -10


def emulator_nice():
    """The nice value to start the emulator at: $TCPNET_VM_NICE, else EMULATOR_NICE."""
    text = os.environ.get("TCPNET_VM_NICE", "").strip()
    if not text:
        return EMULATOR_NICE
    try:
        value = int(text)
    except ValueError:
        raise ValueError(f"TCPNET_VM_NICE: expected an integer nice value in -20..19, got {text!r}") from None
    if not -20 <= value <= 19:
        raise ValueError(f"TCPNET_VM_NICE: expected an integer nice value in -20..19, got {text!r}")
    return value


def compile_bytecode(directory: str) -> None:
    """Write missing or stale .pyc files of directory, where we may (the guest sees it read-only)."""
    if not os.access(directory, os.W_OK):
        return  # an installed package: its installer compiled it
    try:
        compileall.compile_dir(directory, quiet=2, workers=1)
    except OSError:
        pass  # a missing .pyc only costs the guest time


def guest_script(plan: Plan, sentinel: str, exit_file: str) -> str:
    """Return the sh script the guest runs: sentinel, modules, environment, pytest, exit code."""
    q = shlex.quote
    lines = [
        "# Written by pytest-tcpnet (vm/runner.py); the VM runs it as its only command.",
        f"echo {GUEST_PRINTK_LEVEL} > /proc/sys/kernel/printk 2>/dev/null",
        # With time travel, the same addresses on every run: CPython orders sets and dicts of objects by address, and
        # that order decides which process, thread or socket acts first at one guest instant (the guest's kernel's
        # own setting, not the host's).
        *(["echo 0 > /proc/sys/kernel/randomize_va_space"] if plan.env.get(guest.TIME_TRAVEL_ENV) == "1" else []),
        f"echo {q(sentinel)}",
        "missing=''",
        # One modprobe for all (one by one is slow under emulation: docs/vm.md); one by one only to name a failure.
        f"modules={q(' '.join(plan.modules))}",
        "modprobe -a -q $modules 2>/dev/null || for m in $modules; do",
        '  modprobe -q "$m" 2>/dev/null || missing="$missing $m"',
        "done",
        '[ -z "$missing" ] || echo "tcpnet-vm: could not load kernel modules:$missing" >&2',
        "mkdir -p /run/netns",  # /run is the guest's own tmpfs; ip/pyroute2 keep netns here
    ]
    lines += [f"export {k}={q(v)}" for k, v in sorted(plan.env.items())]
    lines += [
        f"cd {q(plan.cwd)} || {{ echo 4 > {q(exit_file)}; exit 4; }}",
        " ".join([q(plan.python), "-m", "pytest", *map(q, plan.pytest_args)]),
        "rc=$?",
        f'echo "$rc" > {q(exit_file)}',
        'exit "$rc"',
    ]
    return "\n".join(lines) + "\n"


def vng_command(plan: Plan, accel: str, script: str, shares: list) -> list:
    """Return the vng command line (no network device: vng adds none unless --network)."""
    cmd = [plan.vng, "--run", plan.kernel.path, "--verbose", "--cpus", str(plan.cpus), "--memory", plan.memory]
    if accel == "tcg":
        cmd.append("--disable-kvm")
    if os.environ.get("TCPNET_VM_VIRTIOFS") != "1":
        # vng first tries virtiofsd for the root and each share and, where that daemon is
        # unusable (Debian 12's), waits for each before falling back to 9p, which slows the boot
        # (docs/vm.md, "Costs (measured)"). Opt back in with TCPNET_VM_VIRTIOFS=1.
        cmd.append("--force-9p")
    for d in shares:
        cmd += ["--rwdir", d]
    cmd += ["--exec", f"sh {script}"]
    return cmd


@dataclass(frozen=True)
class ProbeTools:
    """What a KVM probe boot needs (a Plan has them too): qemu, or vng and the image it boots."""

    qemu: str | None
    vng: str | None
    kernel: Kernel


def kvm_probe_boot(plan: Plan | ProbeTools, timeout: float, boot: fastboot.FastBoot | None = None) -> tuple[bool, str]:
    """Boot a trivial guest under KVM the way the session will; return (it started, detail)."""
    sentinel = f"TCPNET-KVM-PROBE-{secrets.token_hex(8)}"
    workdir = None
    try:
        if boot:
            workdir = check_shareable(tempfile.mkdtemp(prefix="tcpnet-vm-"), "a temporary directory")
            script = os.path.join(workdir, "probe.sh")
            with open(script, "w", encoding="utf-8") as f:
                f.write(fastboot.session_script(f"echo {sentinel}\n"))
            assert plan.qemu is not None, "a fast boot runs qemu"
            cmd = fastboot.qemu_command(plan.qemu, boot, "kvm", 1, "512M", [workdir], script)
        else:
            assert plan.vng is not None, "without a fast boot, vng boots the probe"
            cmd = [
                plan.vng,
                "--run",
                plan.kernel.path,
                "--cpus",
                "1",
                "--memory",
                "512M",
                "--force-9p",
                "--exec",
                f"echo {sentinel}",
            ]
        result = launch(
            cmd,
            cwd=tempfile.gettempdir(),
            sentinel=sentinel.encode(),
            boot_timeout=timeout,
            echo=False,
            after_start_timeout=15,
            cleanup=workdir,
        )
    finally:
        if workdir:
            shutil.rmtree(workdir, ignore_errors=True)
    if result.interrupted:
        raise KeyboardInterrupt
    if result.started:
        return True, "ok"
    if result.timed_out:
        return False, f"no start within {timeout:.0f} s"
    last = result.tail[-1] if result.tail else "no output"
    if result.returncode == 127 or "not found" in last:
        # A tool that is not there says nothing of KVM: an error now, and nothing cached that would pin TCG.
        raise VMUsageError(
            f"the KVM probe could not start {'qemu' if boot else 'vng'}: {last}. "
            + (
                ""
                if boot
                else f"vng runs virtme-run through the shell, so the directory holding vng "
                f"({os.path.dirname(plan.vng or '') or '?'}) must be on PATH; or {VNG_HINT}"
            )
        )
    return False, f"{'qemu' if boot else 'vng'} exited with {result.returncode}: {last}"


def _boot_hints(plan: Plan, tail: list, fast: bool = False) -> list:
    text = "\n".join(tail)
    hints = []
    if re.search(
        r"too old to load a ram disk|Error loading|could not load (PVH|kernel)|"
        r"invalid kernel|not a valid",
        text,
        re.IGNORECASE,
    ):
        hints.append(f"{plan.kernel.path} does not look like a bootable kernel image")
    if "Unable to mount root" in text or "Kernel panic" in text:
        hints.append(
            f"the guest kernel could not mount the host root over 9p/virtiofs: "
            f"are its modules complete in {plan.kernel.modules}?"
        )
    if "busybox" in text.lower() and not any(shutil.which(b) for b in ("busybox", "busybox-static", "busybox.static")):
        hints.append("virtme-ng needs busybox for its initramfs: apt-get install busybox-static")
    if fast:
        hints.append("this was a fast boot; TCPNET_VM_FASTBOOT=0 boots with vng instead")
    hints.append("TCPNET_VM_DEBUG=1 shows the whole boot log live")
    return hints


def _explain(plan: Plan, accel: str, result: LaunchResult, fast: bool = False) -> VMError:
    """Turn a VM that never started our command into an error that names the cause."""
    shown = "\n".join("    " + ln for ln in result.tail[-25:]) or "    (no output)"
    if result.timed_out:
        if accel == "kvm":
            advice = "try --tcpnet-vm-backend=tcg (KVM guests hang at boot on some hosts)"
        elif accel == "uml":
            advice = (
                "User-Mode Linux starts in seconds (docs/vm.md, 'Fidelity and cost'); raise --tcpnet-vm-boot-timeout if this "
                "host is slow or busy, or TCPNET_VM_DEBUG=1 to see its boot log"
            )
        else:
            advice = (
                "software emulation takes tens of seconds to start (docs/vm.md, 'Costs'); raise "
                "--tcpnet-vm-boot-timeout if this host is slow or busy"
            )
        return VMError(
            f"guest did not start within {plan.boot_timeout:g} s under {accel.upper()}; "
            f"VM killed; {advice}. Last lines of its boot log:\n{shown}"
        )
    if accel == "uml":
        build = plan.target.build
        assert build is not None, "a UML guest ran, so its build exists"
        return VMError(
            f"the guest exited (linux.uml status {result.returncode}) before it started the session, booting "
            f"{build.binary} ({build.release}) under User-Mode Linux. Last lines of its output:\n{shown}"
            + (
                f"\n  hint: a build unpacked by dev/setup-uml runs with the libc unpacked beside it: reinstall with "
                f"{uml.SETUP_HINT}"
                if build.binary.startswith(uml.UNPACKED_ROOT) and result.returncode
                else ""
            )
            + "\n  hint: TCPNET_VM_DEBUG=1 shows the whole boot log live"
        )
    hints = "".join(f"\n  hint: {h}" for h in _boot_hints(plan, result.tail, fast))
    return VMError(
        f"the VM exited ({'qemu' if fast else 'vng'} status {result.returncode}) before the guest started the "
        f"session, booting {plan.kernel.path} under {accel.upper()}. Last lines of its "
        f"output:\n{shown}{hints}"
    )


def run_plan(plan: Plan) -> int:
    """Take the host's VM lock, boot the VM, run pytest there, and return pytest's exit code."""
    for w in plan.warnings:
        say(f"warning: {w}")
    try:
        with VMLock(plan.lock_timeout, say):
            return _run_locked(plan)
    except KeyboardInterrupt:
        say("interrupted while waiting for the VM lock")
        return EXIT_INTERRUPTED


def _qemu_boot(plan: Plan) -> tuple[fastboot.FastBoot | None, str]:
    """Fast boot's files for the plan's image, or None with vng as the fallback; and how it boots, in words."""
    assert plan.qemu is not None, "a qemu backend was chosen"
    try:
        return fastboot.prepare(
            plan.kernel, plan.qemu
        ), "fast boot: uncompressed kernel, own init, cached read-only root"
    except fastboot.Unavailable as why_not:
        if plan.vng is None:
            raise VMUsageError(
                f"--tcpnet-vm: fast boot is unavailable ({why_not}) and the fallback needs {VNG_HINT}"
            ) from None
        # vng runs virtme-run through a shell: a virtualenv used without activating it must be on PATH.
        vng_dir = os.path.dirname(plan.vng)
        if vng_dir not in os.environ.get("PATH", "").split(os.pathsep):
            os.environ["PATH"] = vng_dir + os.pathsep + os.environ.get("PATH", "")
        return None, f"with vng; fast boot unavailable: {why_not}"


def _run_locked(plan: Plan) -> int:
    qemu: dict = {}

    def kvm_probe() -> tuple[str, str]:
        if plan.qemu is None:
            return "tcg", f"no {qemu_name()}"
        if "boot" not in qemu:
            qemu["boot"] = _qemu_boot(plan)
        boot, _ = qemu["boot"]

        def probe(timeout: float):
            say(f"probing KVM with a trivial boot (at most {timeout:g} s, result cached)...")
            return kvm_probe_boot(plan, timeout, boot)

        return choose_accel("auto", plan.kernel, plan.qemu, probe, method="fast" if boot else "vng")

    try:
        choice = backends.choose(plan.backend, plan.target, kvm_probe)
    except KeyboardInterrupt:
        say("interrupted during the KVM probe; VM stopped")
        return EXIT_INTERRUPTED
    say(f"backend={choice.backend} ({choice.why})")
    if choice.backend == "uml":
        return _run_uml(plan, choice)
    if plan.qemu is None:
        raise VMUsageError(f"--tcpnet-vm-backend={choice.backend} needs {qemu_hint()}")
    if "boot" not in qemu:
        qemu["boot"] = _qemu_boot(plan)
    boot, how = qemu["boot"]
    accel = choice.backend
    plan = replace(plan, env={**plan.env, "TCPNET_VM_KERNEL": plan.kernel.release, guest.WHY_ENV: choice.why})

    workdir = tempfile.mkdtemp(prefix="tcpnet-vm-")
    server = None
    try:
        check_shareable(workdir, "the runner's temporary directory")
        script = os.path.join(workdir, "run.sh")
        exit_file = os.path.join(workdir, "exitcode")
        sentinel = f"TCPNET-VM-STARTED-{secrets.token_hex(8)}"
        server = _hostcall_server(workdir) if boot else None
        guest_env = {**plan.env, ACCEL_ENV: accel, **({hostcall.ENV: "1"} if server else {})}
        body = guest_script(replace(plan, env=guest_env), sentinel, exit_file)
        with open(script, "w", encoding="utf-8") as f:
            f.write(fastboot.session_script(body) if boot else body)
        shares = plan.shares + [workdir]
        if boot:
            assert plan.qemu is not None, "a qemu backend was chosen"
            cmd = fastboot.qemu_command(
                plan.qemu,
                boot,
                accel,
                plan.cpus,
                plan.memory,
                shares,
                script,
                debug=plan.echo_boot,
                code=plan.code,
                extra=server.qemu_args() if server else (),
            )
        else:
            cmd = vng_command(plan, accel, script, shares)
        say(
            f"booting {plan.kernel.release} ({plan.kernel.path}, {how}), {plan.cpus} CPUs, "
            f"{plan.memory}, no network device; the guest must start within "
            f"{plan.boot_timeout:g} s; shared read-write: {', '.join(plan.shares)}"
        )
        contention = HostContention()
        result = launch(
            cmd,
            cwd=plan.cwd,
            sentinel=sentinel.encode(),
            boot_timeout=plan.boot_timeout,
            echo_boot=plan.echo_boot,
            on_start=lambda s: say(f"guest started after {s:.1f} s; running pytest in it"),
            cleanup=workdir,
            nice=emulator_nice(),
            **_launch_context(server),
        )
        return _finish(plan, accel, result, exit_file, server, contention, fast=boot is not None)
    finally:
        if server is not None:
            server.close()
        shutil.rmtree(workdir, ignore_errors=True)


def _finish(
    plan: Plan,
    backend: str,
    result: LaunchResult,
    exit_file: str,
    server,
    contention: HostContention,
    fast: bool = False,
) -> int:
    """After the guest ran: its pytest's exit code, or an error that explains why there is none; and what the host saw."""
    if result.interrupted:
        say("interrupted; VM stopped")
        return EXIT_INTERRUPTED
    if not result.started:
        raise _explain(plan, backend, result, fast=fast)
    try:
        with open(exit_file, encoding="utf-8") as f:
            code = int(f.read().strip())
    except (OSError, ValueError):
        last = "\n".join("    " + ln for ln in result.tail[-15:])
        launcher = "linux.uml" if backend == "uml" else "qemu" if fast else "vng"
        raise VMError(
            f"the guest ended without reporting pytest's exit code ({launcher} status "
            f"{result.returncode}): a kernel panic, out of memory (--tcpnet-vm-memory) "
            f"or a killed guest?" + (f" Last kernel/stderr lines:\n{last}" if last else "")
        ) from None
    say(
        f"pytest in the VM exited with {code} ({result.total_seconds:.1f} s in all, "
        f"{result.start_seconds:.1f} s of it booting)"
    )
    others = contention.other_cores()
    if backend in ("tcg", "uml") and others is not None and others >= CONTENTION_WARNING_CORES:
        raised = (
            result.nice is not None and result.nice < 0 and (result.autogroup_nice is None or result.autogroup_nice < 0)
        )
        what = "the guest's kernel" if backend == "uml" else "the emulator"
        priority = (
            f"{what} ran at nice {result.nice}, ahead of them"
            if raised
            else f"{what} competed with them (as root it runs at nice -10: TCPNET_VM_NICE)"
        )
        say(
            f"warning: other processes kept {others:.1f} of this host's {os.cpu_count()} CPUs busy during the "
            f"session; {priority}; a starved guest slows its endpoints and its shaped links: "
            f"timing and rate verdicts in the VM are less reliable on a busy host"
        )
    if server is not None and server.calls:
        say(f"the host decoded pcaps and drew plots for the guest: {server.calls} host calls")
    if server is not None and server.cpu_calls:
        say(f"the guest asked for the host's CPU load {server.cpu_calls} times (at each measurement's start and end)")
    return code


def _run_uml(plan: Plan, choice: backends.Choice) -> int:
    """Boot the target's User-Mode Linux build with the session script as its PID 1; return pytest's exit code."""
    build = choice.build
    workdir = check_shareable(tempfile.mkdtemp(prefix="tcpnet-vm-"), "the runner's temporary directory")
    server = None
    try:
        exit_file = os.path.join(workdir, "exitcode")
        sentinel = f"TCPNET-VM-STARTED-{secrets.token_hex(8)}"
        server = None
        # Not with time travel: a guest waiting on the host would see its clock jump by however long the host took.
        # It decodes its pcaps itself (its CPU work takes no guest time there), and the host's load means nothing.
        if os.environ.get(hostcall.ENV) != "0" and not build.time_travel:
            server = hostcall.MailboxServer(os.path.join(workdir, "hostcall")).start()
        guest_env = {
            **plan.env,
            **({guest.TIME_TRAVEL_ENV: "1"} if build.time_travel else {}),
            ACCEL_ENV: "uml",
            "TCPNET_VM_KERNEL": build.release,
            guest.WHY_ENV: choice.why,
            # Every page a UML process touches for the first time is a fault its kernel serves through the
            # host: pymalloc hands whole arenas back and faults them in again, glibc's malloc keeps them
            # (docs/vm.md, "Fidelity and cost").
            "PYTHONMALLOC": os.environ.get("PYTHONMALLOC", "malloc"),
            **({hostcall.ENV: "1", hostcall.MAILBOX_ENV: server.path} if server else {}),
        }
        # A time-travel build has everything built in and no modules to load (dev/uml-time-travel.config).
        modules = () if build.time_travel else plan.modules
        body = guest_script(replace(plan, env=guest_env, modules=modules), sentinel, exit_file)
        shares = plan.shares + [workdir]
        init = os.path.join(workdir, "init.sh")
        with open(init, "w", encoding="utf-8") as f:
            f.write(uml.guest_init(body, build, shares, plan.code, fastboot.find_busybox()))
        os.chmod(init, 0o755)
        # UML keeps its memory in a file under TMPDIR: a private tmpfs there (the watchdog mounts it), so the
        # guest's memory never goes to disk and goes away with it.
        scratch = os.path.join(workdir, "memory")
        os.makedirs(scratch)
        isolation = os.path.join(workdir, "isolation")
        cmd = uml.command(
            build,
            uml.memory_for_uml(plan.memory),
            init,
            os.path.join(workdir, "uml"),
            f"tcpnet-{os.getpid()}-{secrets.token_hex(4)}",
            debug=plan.echo_boot,
        )
        say(
            f"booting {build.release} under User-Mode Linux{' with time travel' if build.time_travel else ''} "
            f"({build.binary}), 1 CPU, {plan.memory}, no network "
            f"device; the guest must start within {plan.boot_timeout:g} s; shared read-write: {', '.join(plan.shares)}"
        )
        contention = HostContention()

        def started(seconds: float) -> None:
            try:
                with open(isolation, encoding="utf-8") as f:
                    protected = f.read().strip()
            except OSError:
                protected = "unknown"
            say(f"guest started after {seconds:.1f} s ({protected}); running pytest in it")

        result = launch(
            cmd,
            cwd=plan.cwd,
            sentinel=sentinel.encode(),
            boot_timeout=plan.boot_timeout,
            echo_boot=plan.echo_boot,
            on_start=started,
            cleanup=workdir,
            nice=emulator_nice(),
            env={"TMPDIR": scratch, "TCPNET_VM_PRIVATE_ROOT": json.dumps({"writable": shares, "status": isolation})},
            **_launch_context(server),
        )
        return _finish(plan, "uml", result, exit_file, server, contention)
    finally:
        if server is not None:
            server.close()
        shutil.rmtree(workdir, ignore_errors=True)


def _launch_context(server) -> dict:
    """launch()'s streams and abort event for this thread's guest; with guests side by side, the guest's own process
    tree is what its CPU-load questions count as its own (a sibling guest is contention)."""
    out, err = console.streams()
    abort = console.abort_event()
    context: dict = {"stdout": out, "stderr": err, "abort": abort}
    if abort is not None and server is not None:
        context["on_spawn"] = lambda pid: setattr(server, "root", pid)
    return context


def _hostcall_server(workdir: str) -> hostcall.Server | None:
    """Serve the guest's host calls (tshark, plots) from a socket in workdir; None when off or impossible."""
    if os.environ.get(hostcall.ENV) == "0":
        return None
    try:
        return hostcall.Server(os.path.join(workdir, "hostcall.sock")).start()
    except (hostcall.Unavailable, OSError) as why_not:
        say(f"note: the guest decodes pcaps and draws plots itself ({why_not})")
        return None


#: Report files each kernel's session writes whole (and would overwrite): one per kernel, named after it.
PER_KERNEL_REPORTS = ("--junitxml", "--junit-xml", "--report-log", "--html")


def per_kernel_reports(args: list, release: str) -> list:
    """args with each report file (JUnit XML, report log, HTML) renamed NAME-RELEASE.EXT, so kernels keep theirs."""
    out, i = [], 0
    while i < len(args):
        name, eq, value = args[i].partition("=")
        if name in PER_KERNEL_REPORTS and (eq or i + 1 < len(args)):
            if not eq:
                value, i = args[i + 1], i + 1
            stem, ext = os.path.splitext(value)
            out.append(f"{name}={stem}-{release}{ext}")
        else:
            out.append(args[i])
        i += 1
    return out


def _results_path(config) -> str | None:
    path = config.getoption("tcpnet_results", default=None)
    return os.path.join(str(config.invocation_params.dir), path) if path else None


def _side_by_side(plans: list, at_once: int, heading) -> list:
    """Each plan's session in a guest of its own, at_once at a time, under one hold of the VM lock."""
    for plan in plans:
        for w in plan.warnings:
            say(f"warning: {w}")
    try:
        with VMLock(plans[0].lock_timeout, say):
            return console.side_by_side([partial(_run_locked, plan) for plan in plans], at_once, heading)
    except KeyboardInterrupt:
        say("interrupted while waiting for the VM lock")
        return [EXIT_INTERRUPTED]


def _jobs(config) -> int:
    """--tcpnet-vm-jobs, checked."""
    jobs = config.getoption("tcpnet_vm_jobs", default=1)
    if jobs < 1:
        raise VMUsageError(f"--tcpnet-vm-jobs must be 1 or more, not {jobs}")
    return jobs


def run_kernels(config, kernels: list) -> int:
    """The session under each kernel (a backend.Target), --tcpnet-vm-jobs guests at a time (default one), then one
    table of every flow per kernel.

    Every plan is made, and so checked, before the first boot. Each guest writes its flows to a
    results file of its own in a shared directory; they are merged into the table and, when the
    user asked for ``--tcpnet-results=PATH``, into PATH. The exit code is the first failing
    session's, 0 when every kernel's session passed.
    """
    from ..report import compare, comparison_table, read_rows

    jobs = _jobs(config)
    collect = check_shareable(tempfile.mkdtemp(prefix="tcpnet-kernels-"), "the runner's temporary directory")
    codes: list = []
    try:
        plans, labels = [], []
        for target in kernels:
            plan = plan_from_config(config, target)
            label = target_label(target)
            args = per_kernel_reports(
                strip_vm_args(plan.pytest_args, flags=(), valued=("--tcpnet-results", "--tcpnet-artifacts")), label
            )
            args.append(f"--tcpnet-results={os.path.join(collect, label + '.jsonl')}")
            if config.pluginmanager.hasplugin("tcpnet"):
                # A kernel's test directories of its own: a passing test under one kernel would otherwise remove
                # what the same test kept failing under another (and guests side by side write them at once).
                args.append(f"--tcpnet-artifacts={artifacts_root(config) / ('kernel-' + label)}")
            plans.append(replace(plan, pytest_args=args, shares=plan.shares + [collect]))
            labels.append(label)

        def heading(k: int) -> str:
            return f"\n{'=' * 20} tcpnet-vm: kernel {labels[k]} ({k + 1} of {len(plans)}) {'=' * 20}\n"

        at_once = min(jobs, len(plans))
        if at_once > 1:
            codes = _side_by_side(plans, at_once, heading)
        for k, plan in enumerate(plans if at_once <= 1 else ()):
            sys.stdout.write(heading(k))
            sys.stdout.flush()
            codes.append(run_plan(plan))
            if codes[-1] == EXIT_INTERRUPTED:
                break
        files = [os.path.join(collect, label + ".jsonl") for label in labels]
        rows = read_rows([f for f in files if os.path.exists(f)])
        sys.stdout.write(f"\n{'=' * 20} tcpnet-vm: {len(rows)} flow(s) under {len(plans)} kernels {'=' * 20}\n")
        if rows:
            sys.stdout.write(comparison_table(compare(rows, by="kernel")) + "\n")
        for label, code in zip(labels, codes):
            sys.stdout.write(f"kernel {label}: pytest exited with {code}\n")
        sys.stdout.flush()
        wanted = _results_path(config)
        if wanted:
            with open(wanted, "w", encoding="utf-8") as out:
                for f in files:
                    if os.path.exists(f):
                        with open(f, encoding="utf-8") as part:
                            out.write(part.read())
            say(f"{len(rows)} flow(s) of all kernels written to {wanted}")
    finally:
        shutil.rmtree(collect, ignore_errors=True)
    return next((code for code in codes if code), 0)


def target_label(target: backends.Target) -> str:
    """What a target's reports are named by: its line when a line was asked for, else its image's release."""
    if target.image is not None and not uml.is_line(target.spec):
        return target.image.release
    return target.line


def run_config_in_vm(config) -> int:
    """Entry point for ``maybe_run_in_vm``: plan, boot, run (under each kernel asked for); errors become exit
    codes."""
    workers = config.getoption("numprocesses", default=None)
    if workers:  # xdist's -n: passed on, it runs inside the guest
        say(
            f"warning: -n {workers} starts xdist workers inside the guest, where they share its CPUs (User-Mode "
            "Linux: one) and each measurement still waits for the one measurement slot: the session is slower "
            "than without -n, not faster. Drop -n for --tcpnet-vm"
        )
    # The guest's whole session is its measurements: the host's idle CPUs poll meanwhile, so the guest's threads do
    # not wait for a halted vCPU's wake-up on a VM host (hostload.idle_cpus_polling; --tcpnet-idle-poll=off: not).
    with idle_cpus_polling(config.getoption("tcpnet_idle_poll", default="on") == "on"):
        return _run_config_in_vm(config)


def _run_config_in_vm(config) -> int:
    try:
        _jobs(config)  # checked before anything else, whether one kernel was asked for or several
        if config.getoption("tcpnet_deterministic", default=False):
            target = backends.time_travel_target(
                config.getoption("tcpnet_vm_kernel"), config.getoption("tcpnet_vm_backend")
            )
            plan = plan_from_config(config, target)
            # Every netem seeded (the default seed 0), and Python's str hashes pinned: set and dict orders decide
            # which namespace, process or socket goes first, and so when each runs on the guest's one CPU.
            pinned = {"TCPNET_SEED": "0", "PYTHONHASHSEED": "0"}
            if config.getoption("tcpnet_seed", default=None) is not None:
                del pinned["TCPNET_SEED"]
            return run_plan(replace(plan, env={**pinned, **plan.env}))
        kernels = backends.resolve_targets(config.getoption("tcpnet_vm_kernel"))
        if len(kernels) > 1:
            return run_kernels(config, kernels)
        return run_plan(plan_from_config(config, kernels[0]))
    except VMError as err:
        say(f"error: {err}")
        return err.exit_code
    except OSError as err:
        say(f"error: could not run the VM: {err}")
        return EXIT_INTERNAL_ERROR
