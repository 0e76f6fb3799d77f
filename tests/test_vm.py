"""Tests of the VM runner (pytest_tcpnet.vm).

Fast tests cover the pure logic. Tests marked ``tcpnet_vm_boot`` start real VMs with vng
and qemu (no mocks): one full boot checks forwarding, netem, exit code and artifacts
together; the others stop the VM during boot (deadline, bogus kernel, Ctrl-C, SIGKILL),
which costs seconds, not a boot. They run a tiny pytest project in a subprocess that
loads the VM wiring from tests/vm_fixtures/tcpnet_vm_shim.py instead of plugin.py.
"""

from __future__ import annotations

import argparse
import bz2
import gzip
import json
import lzma
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from xml.etree import ElementTree

import pytest
from children import default_sigint

from pytest_tcpnet import vm
from pytest_tcpnet.vm import accel, args, backend, fastboot, kernel, lock, runner, uml
from pytest_tcpnet.vm.errors import VMError, VMUsageError

FIXTURES = Path(__file__).parent / "vm_fixtures"
REPO = Path(__file__).resolve().parent.parent


# ---------------------------------------------------------------- pure logic


@pytest.mark.parametrize(
    "given, expected",
    [
        (["--tcpnet-vm", "-q"], ["-q"]),
        (["--tcpnet-kernel", "6.1.0-56-amd64", "tests"], ["tests"]),
        (["--tcpnet-kernel=/boot/vmlinuz-x", "-k", "a or b"], ["-k", "a or b"]),
        (
            [
                "-x",
                "--tcpnet-vm-accel",
                "tcg",
                "--tcpnet-vm-cpus=4",
                "--tcpnet-vm-memory",
                "1G",
                "--tcpnet-vm-boot-timeout=30",
                "--tcpnet-vm",
                "t.py::test_a",
            ],
            ["-x", "t.py::test_a"],
        ),
        # A value that looks like an option is still the option's value.
        (["--tcpnet-kernel", "--weird", "-v"], ["-v"]),
        # Similar names and everything after "--" are not ours.
        (["--tcpnet-vmx", "--tcpnet-artifacts=out"], ["--tcpnet-vmx", "--tcpnet-artifacts=out"]),
        (["--", "--tcpnet-vm"], ["--", "--tcpnet-vm"]),
        # A value option at the very end (pytest would reject it; we must not crash).
        (["-q", "--tcpnet-kernel"], ["-q"]),
    ],
)
def test_strip_vm_args(given, expected):
    assert args.strip_vm_args(given) == expected


def test_guest_environment_selects_and_overrides():
    host = {
        "PATH": "/usr/bin",
        "HOME": "/root",
        "CI": "true",
        "TCPNET_X": "1",
        "PYTEST_ADDOPTS": "-q",
        "PYTEST_CURRENT_TEST": "t.py::a (call)",
        "HYPOTHESIS_PROFILE": "ci",
        "SSH_AUTH_SOCK": "/tmp/s",
        "TMPDIR": "/var/tmp",
    }
    env = args.guest_environment(host, {"TCPNET_IN_VM": "1"})
    assert env == {
        "PATH": "/usr/bin",
        "HOME": "/root",
        "CI": "true",
        "TCPNET_X": "1",
        "PYTEST_ADDOPTS": "-q",
        "HYPOTHESIS_PROFILE": "ci",
        "TCPNET_IN_VM": "1",
    }


@pytest.mark.parametrize("bad", ["/tmp/a b", "/tmp/a,b", "/tmp/a=b", "/tmp/$x", "rel/path", "/"])
def test_check_shareable_rejects_paths_vng_would_mangle(bad):
    with pytest.raises(VMUsageError):
        args.check_shareable(bad, "directory")


def test_share_dirs_keeps_cwd_first_and_drops_nested(tmp_path):
    cwd, out = tmp_path / "proj", tmp_path / "out"
    for d in (cwd, cwd / "reports", out, out / "sub"):
        d.mkdir(parents=True, exist_ok=True)
    got = args.share_dirs(str(cwd), [str(cwd / "reports"), str(out / "sub"), str(out)])
    assert got == [str(cwd), str(out)]


def test_artifact_dirs(tmp_path):
    cwd = str(tmp_path)
    got = args.artifact_dirs(
        cwd,
        xmlpath="reports/j.xml",
        basetemp="/var/tmp/bt/run",
        artifacts="arts",
        report_files=["/srv/log.jsonl"],
    )
    # basetemp's parent: pytest deletes and re-creates basetemp, impossible on a mount point.
    assert got == [f"{cwd}/reports", "/srv", "/var/tmp/bt", f"{cwd}/arts"]
    # The default artifacts directory and pytest's cache live under the rootdir, which may be above the cwd.
    above = args.artifact_dirs(cwd, artifacts="/home/u/tcpnet-artifacts", cache_dir="/home/u/.pytest_cache")
    assert above == ["/home/u/tcpnet-artifacts", "/home/u/.pytest_cache"]


def test_the_artifacts_root_is_the_sessions_own(tmp_path):
    from types import SimpleNamespace

    from pytest_tcpnet.report.artifacts import artifacts_root

    def config(chosen):
        return SimpleNamespace(
            rootpath=tmp_path,
            invocation_params=SimpleNamespace(dir=tmp_path / "proj"),
            getoption=lambda name, default=None: chosen,
        )

    assert artifacts_root(config(None)) == tmp_path / "tcpnet-artifacts"  # the rootdir's, wherever the cwd is
    assert artifacts_root(config("out")) == tmp_path / "proj" / "out"


def test_release_from_name_and_version_order():
    assert kernel.release_from_name("/boot/vmlinuz-6.1.0-56-amd64") == "6.1.0-56-amd64"
    assert kernel.release_from_name("/boot/initrd.img-6.1.0") is None
    releases = ["6.1.0-9-amd64", "6.10.0-1-amd64", "6.1.0-56-amd64", "5.19.0-1-amd64"]
    assert max(releases, key=kernel.version_key) == "6.10.0-1-amd64"
    assert sorted(releases, key=kernel.version_key)[1:3] == ["6.1.0-9-amd64", "6.1.0-56-amd64"]


def test_release_from_image_reads_the_bzimage_header(tmp_path):
    images = sorted(Path("/boot").glob("vmlinuz-*"))
    readable = [p for p in images if os.access(p, os.R_OK)]
    if not readable:
        pytest.skip("no readable /boot/vmlinuz-* on this machine")
    image = readable[-1]
    assert kernel.release_from_image(image) == kernel.release_from_name(image)
    junk = tmp_path / "junk"
    junk.write_bytes(b"\0" * 4096)
    assert kernel.release_from_image(junk) is None


def _fake_boot(tmp_path, images, modules):
    boot, mods = tmp_path / "boot", tmp_path / "modules"
    boot.mkdir()
    mods.mkdir()
    for rel in images:
        (boot / f"vmlinuz-{rel}").write_bytes(b"not a kernel")
    for rel in modules:
        (mods / rel).mkdir()
    return str(boot), str(mods)


def test_default_kernel_is_newest_with_modules_not_running(tmp_path):
    boot, mods = _fake_boot(
        tmp_path,
        images=["6.1.0-9-amd64", "6.1.0-56-amd64", "6.18.4", "6.12.0-1-amd64"],
        modules=["6.1.0-9-amd64", "6.1.0-56-amd64", "6.18.4"],  # 6.12 has no modules
    )
    chosen = kernel.default_kernel(boot, mods, running="6.18.4")
    assert (chosen.release, chosen.path) == ("6.1.0-56-amd64", f"{boot}/vmlinuz-6.1.0-56-amd64")


def test_default_kernel_says_what_is_missing(tmp_path):
    boot, mods = _fake_boot(tmp_path, images=["6.18.4", "6.1.0-1"], modules=["6.18.4"])
    with pytest.raises(VMUsageError) as err:
        kernel.default_kernel(boot, mods, running="6.18.4")
    msg = str(err.value)
    assert "the running kernel" in msg and f"no {mods}/6.1.0-1" in msg
    assert "apt-get install linux-image-amd64" in msg and "--tcpnet-kernel" in msg


def _with_netem(mods, *releases):
    for rel in releases:
        (mods / rel / "modules.dep").write_text("kernel/net/sched/sch_netem.ko.xz: \n")


def test_several_kernels_or_all_of_them_are_resolved_before_any_boot(tmp_path):
    boot, mods = _fake_boot(
        tmp_path,
        images=["6.1.0-56-amd64", "6.12.95+deb12-amd64", "6.18.4"],
        modules=["6.1.0-56-amd64", "6.12.95+deb12-amd64", "6.18.4"],
    )
    _with_netem(tmp_path / "modules", "6.1.0-56-amd64", "6.12.95+deb12-amd64")  # 6.18.4: no sch_netem

    def resolve(specs):
        return [t.image.release for t in backend.resolve_targets(specs, [], boot, mods)]

    assert resolve(["6.12.95+deb12-amd64", "6.1.0-56-amd64"]) == ["6.12.95+deb12-amd64", "6.1.0-56-amd64"]  # as given
    assert resolve(["all"]) == ["6.1.0-56-amd64", "6.12.95+deb12-amd64"]  # oldest first, netem only
    assert resolve(["6.18.4"]) == ["6.18.4"]  # one: as before
    assert resolve(["6.12"]) == ["6.12.95+deb12-amd64"]  # a kernel line: its newest image
    with pytest.raises(VMUsageError, match="6.1.0-56-amd64 given twice"):
        resolve(["6.1.0-56-amd64", f"{boot}/vmlinuz-6.1.0-56-amd64"])
    with pytest.raises(VMUsageError, match="6.1 given twice"):
        resolve(["6.1", "6.1"])
    with pytest.raises(VMUsageError, match=r"6.18.4: kernel line 6.18 \(image 6.18.4\) has no sch_netem"):
        resolve(["6.1.0-56-amd64", "6.18.4"])
    with pytest.raises(VMUsageError, match="releases in .*: .*6.1.0-56-amd64"):
        resolve(["6.1.0-56-amd64", "5.10.0-1"])
    with pytest.raises(VMUsageError, match="no kernel of line 5.4 is installed.*dev/setup-uml"):
        resolve(["5.4"])
    with pytest.raises(VMUsageError, match="give it alone"):
        resolve(["all", "6.1.0-56-amd64"])
    (tmp_path / "bare").mkdir()
    bare, bare_mods = _fake_boot(tmp_path / "bare", images=["6.18.4"], modules=["6.18.4"])
    with pytest.raises(VMUsageError, match="no kernel with sch_netem is installed.*dev/setup-uml"):
        backend.resolve_targets(["all"], [], bare, bare_mods)


def test_resolve_kernel_errors(tmp_path):
    boot, mods = _fake_boot(tmp_path, images=["6.1.0-1"], modules=[])
    with pytest.raises(VMUsageError, match="does not exist"):
        kernel.resolve_kernel(str(tmp_path / "nope" / "vmlinuz"), boot, mods)
    with pytest.raises(VMUsageError, match="releases in .*: 6.1.0-1"):
        kernel.resolve_kernel("5.10.0-1", boot, mods)
    with pytest.raises(VMUsageError, match="has no modules"):
        kernel.resolve_kernel("6.1.0-1", boot, mods)
    odd = tmp_path / "kernel.img"
    odd.write_bytes(b"x")
    with pytest.raises(VMUsageError, match="cannot tell the release"):
        kernel.resolve_kernel(str(odd), boot, mods)


def test_accel_cache_and_choice(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    k = kernel.Kernel("/boot/vmlinuz-x", "x", "/lib/modules/x")
    calls = []

    def failing_probe(timeout):
        calls.append(timeout)
        return False, f"no start within {timeout:g} s"

    assert accel.choose_accel("tcg", k, "qemu-nope", failing_probe) == ("tcg", "forced by --tcpnet-vm-backend=tcg")
    with pytest.raises(VMUsageError):
        accel.choose_accel("fast", k, "qemu-nope", failing_probe)
    usable, why = accel.kvm_usable()
    got, reason = accel.choose_accel("auto", k, "qemu-nope", failing_probe, probe_timeout=7)
    assert got == "tcg"
    if not usable:
        assert why in reason and calls == []
        return
    assert calls == [7] and "no start within 7 s" in reason
    key = accel.cache_key(k, accel.qemu_version("qemu-nope"))
    assert accel.read_cache(key)["accel"] == "tcg"
    # The second time the cached answer is used, without a probe.
    got, reason = accel.choose_accel("auto", k, "qemu-nope", failing_probe)
    assert got == "tcg" and "cached" in reason and calls == [7]


def test_cache_key_depends_on_kernel_qemu_and_host():
    k1 = kernel.Kernel("/boot/vmlinuz-a", "a", "/lib/modules/a")
    k2 = kernel.Kernel("/boot/vmlinuz-b", "b", "/lib/modules/b")
    keys = {
        accel.cache_key(k1, "QEMU 7.2", "6.18"),
        accel.cache_key(k2, "QEMU 7.2", "6.18"),
        accel.cache_key(k1, "QEMU 8.0", "6.18"),
        accel.cache_key(k1, "QEMU 7.2", "6.19"),
    }
    assert len(keys) == 4


def _plan(tmp_path, **over):
    fields = dict(
        vng="/usr/bin/vng",
        qemu="/usr/bin/qemu-system-x86_64",
        target=backend.Target("r", "6.1", kernel.Kernel("/boot/vmlinuz-r", "r", "/lib/modules/r")),
        backend="tcg",
        cpus=2,
        memory="2G",
        boot_timeout=60.0,
        lock_timeout=5.0,
        cwd=str(tmp_path),
        python="/usr/bin/python3",
        pytest_args=["-k", "a and not 'b c'", "it's.py", "$HOME"],
        env={"TCPNET_IN_VM": "1", "TCPNET_Q": 'x\'y "z" $PATH'},
        shares=[str(tmp_path)],
    )
    fields.update(over)
    return runner.Plan(**fields)


def test_without_fast_boot_a_missing_vng_is_named_before_anything_boots(tmp_path, monkeypatch):
    def unavailable(kernel, qemu):
        raise runner.fastboot.Unavailable("the kernel is zstd-compressed")

    monkeypatch.setattr(runner.fastboot, "prepare", unavailable)
    with pytest.raises(
        VMUsageError,
        match=r"fast boot is unavailable \(the kernel is zstd-compressed\) and the "
        r"fallback needs virtme-ng's `vng`: pip install virtme-ng",
    ):
        runner._run_locked(_plan(tmp_path, vng=None))


def test_guest_script_quotes_everything(tmp_path):
    plan = _plan(tmp_path)
    text = runner.guest_script(plan, "SENTINEL-1", "/tmp/w/exitcode")
    # Syntax only: running it here would load modules and set printk on the host.
    subprocess.run(["sh", "-n"], input=text, text=True, check=True)
    lines = text.splitlines()
    sentinel_at = lines.index("echo SENTINEL-1")
    assert all(not ln.startswith(("modprobe", "for m", "export")) for ln in lines[:sentinel_at])
    (pytest_line,) = [ln for ln in lines if " -m pytest" in ln]
    assert shlex.split(pytest_line) == ["/usr/bin/python3", "-m", "pytest", *plan.pytest_args]
    (q_line,) = [ln for ln in lines if ln.startswith("export TCPNET_Q=")]
    assert shlex.split(q_line[len("export ") :]) == ['TCPNET_Q=x\'y "z" $PATH']
    assert "sch_netem" in text and "/tmp/w/exitcode" in text


def test_vng_command_has_no_network_and_no_rw_root(tmp_path):
    cmd = runner.vng_command(_plan(tmp_path), "tcg", "/tmp/w/run.sh", [str(tmp_path), "/tmp/w"])
    assert "--disable-kvm" in cmd
    assert not any(a.startswith(("--network", "-n", "--rw=")) or a == "--rw" for a in cmd)
    assert cmd[cmd.index("--exec") + 1] == "sh /tmp/w/run.sh"
    assert [cmd[i + 1] for i, a in enumerate(cmd) if a == "--rwdir"] == [str(tmp_path), "/tmp/w"]
    assert "--disable-kvm" not in runner.vng_command(_plan(tmp_path), "kvm", "/x", [])


def test_missing_tools_name_the_package(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(runner.sys, "executable", str(tmp_path / "python"))
    # Neither is required by itself (User-Mode Linux needs neither): a backend that needs qemu names the package.
    assert runner.find_tools() == (None, None)
    assert "apt-get install qemu-system" in runner.qemu_hint()
    assert runner.find_vng() is None  # fast boot needs no vng: only its fallback does (VNG_HINT)
    fake_vng = tmp_path / "vng"
    fake_vng.write_text("#!/bin/sh\n")
    fake_vng.chmod(0o755)
    assert runner.find_vng() == str(fake_vng)  # beside the interpreter: a virtualenv that is not activated
    monkeypatch.setenv("PATH", "/nonexistent")
    assert runner.find_vng() == str(fake_vng)
    assert "pip install virtme-ng" in runner.VNG_HINT


class _Group:
    """Just enough of pytest's OptionGroup to check option defaults."""

    def __init__(self):
        self.parser = argparse.ArgumentParser()

    def addoption(self, *names, **kw):
        self.parser.add_argument(*names, **kw)


def test_add_options_defaults_and_env(monkeypatch):
    g = _Group()
    vm.add_options(g)
    ns = g.parser.parse_args([])
    assert (ns.tcpnet_vm, ns.tcpnet_vm_kernel, ns.tcpnet_vm_backend) == (False, None, "auto")
    assert (ns.tcpnet_vm_cpus, ns.tcpnet_vm_memory, ns.tcpnet_vm_boot_timeout) == (2, "2G", 120.0)
    monkeypatch.setenv("TCPNET_VM_ACCEL", "tcg")
    monkeypatch.setenv("TCPNET_VM_BOOT_TIMEOUT", "300")
    g = _Group()
    vm.add_options(g)
    ns = g.parser.parse_args(["--tcpnet-vm", "--tcpnet-kernel", "6.1.0-56-amd64"])
    assert (ns.tcpnet_vm, ns.tcpnet_vm_kernel) == (True, ["6.1.0-56-amd64"])
    assert (ns.tcpnet_vm_backend, ns.tcpnet_vm_boot_timeout) == ("tcg", 300.0)
    # The backend option's new name wins over the old one's variable; both spellings set it.
    monkeypatch.setenv("TCPNET_VM_BACKEND", "uml")
    g = _Group()
    vm.add_options(g)
    assert g.parser.parse_args([]).tcpnet_vm_backend == "uml"
    assert g.parser.parse_args(["--tcpnet-vm-accel", "kvm"]).tcpnet_vm_backend == "kvm"
    assert g.parser.parse_args(["--tcpnet-vm-backend=tcg"]).tcpnet_vm_backend == "tcg"
    with pytest.raises(SystemExit):
        g.parser.parse_args(["--tcpnet-vm-backend=qemu"])


class _PluginManager:
    def hasplugin(self, name):
        return False  # pytest without the tcpnet plugin: no artifacts directory to resolve


class _Config:
    def __init__(self, **opts):
        self.opts = opts
        self.pluginmanager = _PluginManager()

    def getoption(self, name, default=None):
        return self.opts.get(name, default)


def test_maybe_run_in_vm_is_a_no_op_unless_asked_or_inside(monkeypatch):
    monkeypatch.delenv("TCPNET_IN_VM", raising=False)
    assert not vm.inside_vm()
    assert vm.maybe_run_in_vm(_Config(tcpnet_vm=False)) is None
    monkeypatch.setenv("TCPNET_IN_VM", "1")
    assert vm.inside_vm()
    assert vm.maybe_run_in_vm(_Config(tcpnet_vm=True)) is None  # no recursion in the guest


def test_importing_vm_is_cheap():
    code = (
        "import sys; import pytest_tcpnet.vm; "
        "heavy = {'subprocess', 'selectors', 'virtme', 'virtme_ng', 'pytest_tcpnet.vm.runner'}; "
        "print(sorted(heavy & set(sys.modules)))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_options_are_registered_on_pytest(tmp_path):
    proj = _project(tmp_path, "def test_nothing():\n    pass\n")
    out = _pytest(proj, ["--help"], timeout=120)
    assert out.returncode == 0, out.stderr
    for opt in (
        "--tcpnet-vm ",
        "--tcpnet-kernel",
        "--tcpnet-vm-accel",
        "--tcpnet-vm-cpus",
        "--tcpnet-vm-memory",
        "--tcpnet-vm-boot-timeout",
    ):
        assert opt in out.stdout


# ---------------------------------------------------------------- fast boot (pure parts)


def _elf_with_notes(notes) -> bytes:
    """A minimal 64-bit little-endian ELF whose one program header is a PT_NOTE segment."""
    import struct

    body = b""
    for name, ntype, desc in notes:
        name += b"\0"
        body += struct.pack("<III", len(name), len(desc), ntype)
        body += name + b"\0" * (-len(name) % 4) + desc + b"\0" * (-len(desc) % 4)
    header = bytearray(64)
    header[:6] = b"\x7fELF\x02\x01"
    struct.pack_into("<Q", header, 0x20, 64)  # e_phoff
    struct.pack_into("<HH", header, 0x36, 56, 1)  # e_phentsize, e_phnum
    phdr = struct.pack("<IIQQQQQQ", 4, 0, 64 + 56, 0, 0, len(body), len(body), 4)
    return bytes(header) + phdr + body


def _bzimage(payload: bytes, setup_sects: int = 1) -> bytes:
    """An x86 boot sector + setup header pointing at ``payload`` (boot protocol 2.15)."""
    import struct

    image = bytearray((setup_sects + 1) * 512)
    image[0x1F1] = setup_sects
    image[0x202:0x206] = b"HdrS"
    struct.pack_into("<H", image, 0x206, 0x020F)
    struct.pack_into("<II", image, 0x248, 16, len(payload))  # payload_offset, payload_length
    return bytes(image) + b"\0" * 16 + payload + b"\0\0\0\0"


PVH_NOTE = (b"Xen", 18, b"\x00\x10\x00\x01")


def _zstd(data: bytes) -> bytes:
    """A zstd frame as Debian's 6.12 kernel and its modules are packed (no content size in the header)."""
    zstandard = pytest.importorskip("zstandard", reason="the vm extra's zstandard decompresses 6.12's kernel")
    return zstandard.ZstdCompressor(write_content_size=False).compress(data)


COMPRESSORS = {
    "xz": lambda d: lzma.compress(d, lzma.FORMAT_XZ),
    "gzip": gzip.compress,
    "bzip2": bz2.compress,
    "zstd": _zstd,
}


@pytest.mark.parametrize("compress", ["xz", "gzip", "bzip2", "zstd"])
def test_vmlinux_is_extracted_once_into_the_cache(tmp_path, compress):
    elf = _elf_with_notes([(b"Linux", 6, b"x" * 5), PVH_NOTE])
    packed = COMPRESSORS[compress](elf)
    image = tmp_path / "vmlinuz-9.9"
    image.write_bytes(_bzimage(packed))
    cache = tmp_path / "cache"
    cache.mkdir()
    k = kernel.Kernel(str(image), "9.9", str(tmp_path))
    path = fastboot.vmlinux_for(k, cache)
    assert Path(path).read_bytes() == elf and Path(path).parent == cache
    assert oct(os.stat(path).st_mode & 0o777) == oct(0o600)
    first = os.stat(path).st_mtime_ns
    assert fastboot.vmlinux_for(k, cache) == path and os.stat(path).st_mtime_ns == first


def test_vmlinux_without_pvh_or_with_unknown_compression_is_refused(tmp_path):
    import lzma

    cache = tmp_path / "cache"
    cache.mkdir()
    no_pvh = tmp_path / "vmlinuz-a"
    no_pvh.write_bytes(_bzimage(lzma.compress(_elf_with_notes([(b"Linux", 6, b"abcd")]))))
    with pytest.raises(fastboot.Unavailable, match="no PVH entry point"):
        fastboot.vmlinux_for(kernel.Kernel(str(no_pvh), "a", str(tmp_path)), cache)
    lz4 = tmp_path / "vmlinuz-b"
    lz4.write_bytes(_bzimage(b"\x02\x21\x4c\x18" + os.urandom(64)))
    with pytest.raises(fastboot.Unavailable, match="unknown kernel compression"):
        fastboot.vmlinux_for(kernel.Kernel(str(lz4), "b", str(tmp_path)), cache)
    junk = tmp_path / "vmlinuz-c"
    junk.write_bytes(os.urandom(4096))
    with pytest.raises(fastboot.Unavailable, match="not an x86 bzImage"):
        fastboot.vmlinux_for(kernel.Kernel(str(junk), "c", str(tmp_path)), cache)
    assert not list(cache.iterdir())  # nothing half-written is left behind


def test_the_installed_kernel_has_a_pvh_entry(tmp_path):
    """The real kernel the VM boots: its payload decompresses to an ELF with a PVH note."""
    try:
        k = kernel.resolve_kernel(os.environ.get("TCPNET_VM_TEST_KERNEL"))
    except VMUsageError as err:
        pytest.skip(f"no kernel to boot here: {err}")
    with open(k.path, "rb") as f:
        elf = fastboot.decompress(fastboot.bzimage_payload(f.read()))
    assert fastboot.has_pvh_entry(elf)


def test_module_order_puts_dependencies_first(tmp_path):
    (tmp_path / "modules.dep").write_text(
        "kernel/virtio_pci.ko: kernel/virtio_pci_modern_dev.ko kernel/virtio.ko kernel/virtio_ring.ko\n"
        "kernel/virtio_pci_modern_dev.ko:\n"
        "kernel/virtio.ko: kernel/virtio_ring.ko\n"
        "kernel/virtio_ring.ko:\n"
        "kernel/9p.ko.xz: kernel/9pnet.ko kernel/fscache.ko kernel/netfs.ko\n"
        "kernel/9pnet.ko:\nkernel/fscache.ko: kernel/netfs.ko\nkernel/netfs.ko:\n"
        "kernel/9pnet_virtio.ko: kernel/9pnet.ko kernel/virtio.ko kernel/virtio_ring.ko\n"
    )
    (tmp_path / "modules.builtin").write_text("kernel/drivers/char/virtio_console.ko\n")
    order = fastboot.module_order(str(tmp_path))
    assert order == [
        "kernel/virtio_ring.ko",
        "kernel/virtio.ko",
        "kernel/virtio_pci_modern_dev.ko",
        "kernel/virtio_pci.ko",
        "kernel/9pnet.ko",
        "kernel/9pnet_virtio.ko",
        "kernel/netfs.ko",
        "kernel/fscache.ko",
        "kernel/9p.ko.xz",
    ]
    (tmp_path / "modules.builtin").write_text("")
    with pytest.raises(fastboot.Unavailable, match="virtio_console is neither built into"):
        fastboot.module_order(str(tmp_path))


@pytest.mark.parametrize("suffix, compress", [("", None), (".xz", "xz"), (".gz", "gzip"), (".zst", "zstd")])
def test_compressed_modules_go_into_the_initramfs_decompressed(tmp_path, suffix, compress):
    """busybox's insmod takes plain .ko: 6.1's modules are plain, 6.12's xz, other distributions' gz or zst."""
    module = b"\x7fELF" + os.urandom(4096)
    path = tmp_path / f"sch_netem.ko{suffix}"
    path.write_bytes(COMPRESSORS[compress](module) if compress else module)
    assert fastboot._read_module(str(path)) == module


def _cpio_names(data: bytes) -> dict:
    """Map each name in a newc cpio archive to its contents."""
    entries, pos = {}, 0
    while True:
        head = data[pos : pos + 110]
        namesize, filesize = int(head[94:102], 16), int(head[54:62], 16)
        name = data[pos + 110 : pos + 110 + namesize - 1].decode()
        pos += 110 + namesize
        pos += -pos % 4
        if name == "TRAILER!!!":
            return entries
        entries[name] = data[pos : pos + filesize]
        pos += filesize + (-filesize % 4)


def test_initramfs_has_busybox_modules_and_init(tmp_path):
    try:
        busybox = fastboot.find_busybox()
    except fastboot.Unavailable as err:
        pytest.skip(str(err))
    archive = fastboot.build_initramfs(busybox, [("virtio.ko", b"m1"), ("9p.ko", b"m2")])
    entries = _cpio_names(archive)
    assert entries["init"].decode() == fastboot.INIT
    assert entries["modules/order"] == b"virtio.ko\n9p.ko\n"
    assert entries["modules/9p.ko"] == b"m2" and "bin/busybox" in entries
    assert entries["bin/switch_root"] == b"busybox"  # a symlink's body is its target
    subprocess.run(["sh", "-n"], input=fastboot.INIT, text=True, check=True)


def test_session_script_powers_off_after_the_body(tmp_path):
    body = runner.guest_script(_plan(tmp_path), "SENTINEL-1", "/tmp/w/exitcode")
    text = fastboot.session_script(body)
    subprocess.run(["sh", "-n"], input=text, text=True, check=True)
    assert text.index("SENTINEL-1") < text.index("poweroff -f")
    assert "(\n" + body + ")\n" in text  # the body's `exit` leaves a subshell, not PID 1


def test_fast_qemu_command_has_no_network_and_a_read_only_root(tmp_path):
    boot = fastboot.FastBoot("/c/vmlinux", "/c/initramfs.cpio")
    cmd = fastboot.qemu_command(
        "/usr/bin/qemu-system-x86_64", boot, "tcg", 2, "1G", [str(tmp_path), "/tmp/w"], "/tmp/w/run.sh"
    )
    text = " ".join(cmd)
    assert "q35,accel=tcg" in text and "-nodefaults" in cmd
    assert not any(a in ("-netdev", "-nic", "-net") for a in cmd)
    fsdevs = [cmd[i + 1] for i, a in enumerate(cmd) if a == "-fsdev"]
    assert fsdevs[0] == "local,id=root,path=/,security_model=none,readonly=on,multidevs=remap"
    assert [f for f in fsdevs[1:] if "readonly" in f] == []
    assert [f.split(",")[2] for f in fsdevs[1:]] == [f"path={tmp_path}", "path=/tmp/w"]
    append = cmd[cmd.index("-append") + 1]
    assert f"tcpnet_shares={tmp_path},/tmp/w" in append and "tcpnet_script=/tmp/w/run.sh" in append
    assert "tcpnet_code= " in append  # no code directories asked for
    with_code = fastboot.qemu_command("q", boot, "tcg", 1, "1G", [], "/s", code=["/tmp/venv", "/src/pkg"])
    assert "tcpnet_code=/tmp/venv,/src/pkg" in with_code[with_code.index("-append") + 1]
    assert len([a for a in with_code if a == "-fsdev"]) == 1  # seen through the root: no device of their own
    assert "quiet" in append
    kvm = fastboot.qemu_command("q", boot, "kvm", 1, "1G", [], "/s", debug=True)
    assert "q35,accel=kvm" in kvm and kvm[kvm.index("-cpu") + 1] == "host"
    assert "quiet" not in kvm[kvm.index("-append") + 1]


def test_fast_boot_can_be_disabled(monkeypatch):
    monkeypatch.setenv("TCPNET_VM_FASTBOOT", "0")
    with pytest.raises(fastboot.Unavailable, match="TCPNET_VM_FASTBOOT=0"):
        fastboot.prepare(kernel.Kernel("/k", "r", "/m"), "/usr/bin/qemu-system-x86_64")


# ---------------------------------------------------------------- one VM at a time


@pytest.fixture
def lock_dir(tmp_path):
    d = tmp_path / "lockdir"
    d.mkdir(mode=0o700)
    return d


def test_second_session_waits_and_names_the_holder(lock_dir):
    import threading

    holder = lock.VMLock(directory=lock_dir)
    holder.acquire()
    said = []
    timer = threading.Timer(0.5, holder.release)
    timer.start()
    t0 = time.monotonic()
    with lock.VMLock(timeout=10, say=said.append, directory=lock_dir, poll=0.05):
        waited = time.monotonic() - t0
        info = json.loads((lock_dir / "vm.lock").read_text())
    timer.join()
    assert 0.4 < waited < 5
    assert len(said) == 1 and f"held by pid {os.getpid()}" in said[0], said
    assert info["pid"] == os.getpid() and info["cwd"] == os.getcwd()
    assert (lock_dir / "vm.lock").read_text() == ""  # released: nobody named any more


def test_second_session_refuses_after_the_timeout(lock_dir):
    with lock.VMLock(directory=lock_dir):
        t0 = time.monotonic()
        with pytest.raises(lock.VMBusy, match=rf"pid {os.getpid()} .*gave up after 0.3 s"):
            lock.VMLock(timeout=0.3, directory=lock_dir, poll=0.05).acquire()
        assert time.monotonic() - t0 < 3


def test_lock_file_is_private_and_cannot_be_planted(lock_dir, tmp_path):
    with lock.VMLock(directory=lock_dir):
        st = os.stat(lock_dir / "vm.lock")
        assert st.st_mode & 0o777 == 0o644 and st.st_uid == os.geteuid()
    # A symlink planted at the lock's path is refused, and its target left alone.
    (lock_dir / "vm.lock").unlink()
    target = tmp_path / "victim"
    target.write_text("precious")
    (lock_dir / "vm.lock").symlink_to(target)
    with pytest.raises(VMError, match="symbolic link"):
        lock.VMLock(directory=lock_dir).acquire()
    assert target.read_text() == "precious"
    # A world-writable lock file (or one with a second link) is refused too.
    (lock_dir / "vm.lock").unlink()
    (lock_dir / "vm.lock").write_text("")
    os.chmod(lock_dir / "vm.lock", 0o666)
    with pytest.raises(VMError, match="mode 0644"):
        lock.VMLock(directory=lock_dir).acquire()
    os.chmod(lock_dir / "vm.lock", 0o644)
    os.link(lock_dir / "vm.lock", tmp_path / "second-link")
    with pytest.raises(VMError, match="2 links"):
        lock.VMLock(directory=lock_dir).acquire()


@pytest.mark.skipif(
    __import__("pytest_tcpnet.rootless").rootless.inside(),
    reason="root-only: handing a directory to another uid needs real root",
)
def test_lock_directory_must_not_be_writable_by_others(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o1777)  # like /tmp
    with pytest.raises(VMError, match="not writable by group or others"):
        lock.VMLock(directory=shared).acquire()
    assert not (shared / "vm.lock").exists()
    if os.geteuid() == 0:
        foreign = tmp_path / "foreign"
        foreign.mkdir(mode=0o755)
        os.chown(foreign, 65534, 65534)  # another user's directory
        with pytest.raises(VMError, match="must be owned by uid 0"):
            lock.VMLock(directory=foreign).acquire()


def test_default_lock_dir(monkeypatch, tmp_path):
    monkeypatch.delenv("TCPNET_VM_LOCK_DIR", raising=False)
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    assert lock.default_lock_dir() == Path("/run/pytest-tcpnet")  # /run: root-only
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    assert lock.default_lock_dir() == tmp_path / "pytest-tcpnet"
    monkeypatch.setenv("TCPNET_VM_LOCK_DIR", "/elsewhere")
    assert lock.default_lock_dir() == Path("/elsewhere")


# ---------------------------------------------------------------- real VMs


def _project(tmp_path, test_source: str) -> Path:
    """Write a tiny pytest project that loads the VM wiring from the shim."""
    proj = tmp_path / "proj"
    proj.mkdir()
    shutil.copy(FIXTURES / "tcpnet_vm_shim.py", proj)
    (proj / "pytest.ini").write_text("[pytest]\n")
    (proj / "test_guest.py").write_text(test_source)
    return proj


def _base_args():
    return ["-p", "no:cacheprovider", "-p", "no:tcpnet", "-p", "tcpnet_vm_shim"]


def _env(**extra):
    env = dict(os.environ)
    env.pop("TCPNET_IN_VM", None)
    # The projects run elsewhere: make them import this checkout, not an installed copy.
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    env.update(extra)
    return env


def _pytest(proj, extra, timeout, env=None):
    return subprocess.run(
        [sys.executable, "-m", "pytest", *_base_args(), *extra],
        cwd=proj,
        env=env or _env(),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def _popen(proj, extra, env=None):
    return subprocess.Popen(
        [sys.executable, "-m", "pytest", *_base_args(), *extra],
        cwd=proj,
        env=env or _env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=default_sigint,  # its Ctrl-C test needs SIGINT handled even if this session ignores it
    )


def _qemus_in(directory: Path) -> list:
    """Return the pids of qemu processes whose cwd is ``directory`` (ours: vng runs there)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if (entry / "comm").read_text().startswith("qemu-system") and os.readlink(entry / "cwd") == str(directory):
                pids.append(int(entry.name))
        except OSError:
            continue
    return pids


def _workdirs_for(proj: Path) -> list:
    """Return the runner's temporary directories whose guest script runs in ``proj``."""
    found = []
    for d in Path(tempfile.gettempdir()).glob("tcpnet-vm-*"):
        for script in ("run.sh", "init.sh"):  # qemu's guest script, User-Mode Linux's
            try:
                if f"cd {proj} " in (d / script).read_text():
                    found.append(d)
            except OSError:
                continue
    return found


def _wait_for(predicate, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.2)
    return predicate()


@pytest.fixture(scope="module")
def vm_kernel():
    """The kernel the boot tests use; skip them where a VM cannot be started at all."""
    try:
        if runner.find_tools()[1] is None:
            pytest.skip(f"cannot start a qemu VM here: {runner.qemu_hint()}")
        return kernel.resolve_kernel(os.environ.get("TCPNET_VM_TEST_KERNEL"))
    except VMUsageError as err:
        pytest.skip(f"cannot start a VM here: {err}")


# Software emulation unless told otherwise: KVM guests hang at boot on the project's hosts.
ACCEL = os.environ.get("TCPNET_VM_TEST_ACCEL", "tcg")

GUEST_TESTS = '''
import json, os, subprocess, sys

import pytest_tcpnet

def mount_of(path):
    """(mount point, its mount and superblock options) of the mount that holds path."""
    best = ("", "")
    with open("/proc/self/mountinfo") as f:
        for line in f:
            fields = line.split()
            point, tail = fields[4], fields[fields.index("-") + 1:]
            if (path + "/").startswith(point.rstrip("/") + "/") and len(point) >= len(best[0]):
                best = (point, fields[5] + "," + tail[2])
    return best

def test_forwarded():
    with open("guest.json", "w") as f:  # the cwd is shared read-write with the host
        json.dump({"argv": sys.argv[1:], "release": os.uname().release,
                   "in_vm": os.environ.get("TCPNET_IN_VM"),
                   "accel": os.environ.get("TCPNET_VM_ACCEL"),
                   "token": os.environ.get("TCPNET_VMTEST_TOKEN"),
                   "ifaces": sorted(os.listdir("/sys/class/net")),
                   "package_mount": mount_of(os.path.dirname(os.path.realpath(pytest_tcpnet.__file__))),
                   "cwd_mount": mount_of(os.getcwd())}, f)

def test_netem_is_real():
    from pyroute2 import IPRoute, netns
    name = "tcpnet-vmtest"
    netns.create(name)
    try:
        with IPRoute(netns=name) as ipr:
            ipr.link("add", ifname="vmt0", kind="veth", peer="vmt1")
            idx = ipr.link_lookup(ifname="vmt0")[0]
            ipr.tc("add", "netem", idx, delay=20000, loss=1)
            kinds = [q.get_attr("TCA_KIND") for q in ipr.get_qdiscs(idx)]
        assert "netem" in kinds
    finally:
        netns.remove(name)

def test_host_does_the_analysis(tmp_path):
    import pytest
    from pytest_tcpnet import Capture, Host, Lab, vm
    from pytest_tcpnet.analysis import plots
    from pytest_tcpnet.capture import decode
    if not vm.use_host_for_analysis():  # what plugin.py does at configure time
        pytest.skip("no host-call port: a vng boot")
    with Lab() as lab:
        pair = lab.pair(client=Host(sysctls={"net.ipv4.tcp_rmem": "4096 4096 4096"}))
        with Capture(pair.server, directory=tmp_path) as cap:
            result = pair.transfer(nbytes=100_000)
    assert result.host_contention_cpus is not None  # the host's load while it ran, asked of the runner
    on_host = decode.decode_pcap(cap.result.pcap)
    decode.run_elsewhere(None)
    assert on_host == decode.decode_pcap(cap.result.pcap) and len(on_host) > 50
    paths = plots.plot_result(cap.result, tmp_path)
    assert len(paths) == 3 and all(p.read_bytes().startswith(b"\\x89PNG") for p in paths)
    assert "matplotlib" not in sys.modules  # drawn on the host

def test_fails():
    assert 1 + 1 == 3, "deliberate failure"
'''


@pytest.mark.tcpnet_vm_boot
def test_session_runs_in_vm(tmp_path, vm_kernel):
    """One boot: arguments and env forwarded, chosen kernel, real netem, exit code, junitxml."""
    proj = _project(tmp_path, GUEST_TESTS)
    junit = tmp_path / "reports" / "junit.xml"  # outside the cwd: needs its own share
    out = _pytest(
        proj,
        [
            "--tcpnet-vm",
            "--tcpnet-kernel",
            vm_kernel.release,
            f"--tcpnet-vm-accel={ACCEL}",
            "--tcpnet-vm-cpus",
            "2",
            "--tcpnet-vm-memory=1G",
            "--tcpnet-vm-boot-timeout",
            "240",
            f"--junitxml={junit}",
            "-v",
            "-k",
            "forwarded or netem or fails or host",
        ],
        timeout=900,
        env=_env(TCPNET_VMTEST_TOKEN="tok en'1", TCPNET_VM_MODULES="tcpnet_no_such_module"),
    )
    log = f"--- stdout\n{out.stdout}\n--- stderr\n{out.stderr}"
    assert out.returncode == 1, log  # one deliberate failure, propagated from the guest
    assert f"backend={ACCEL}" in out.stderr and "guest started after" in out.stderr, log
    assert "test_forwarded PASSED" in out.stdout, log
    assert "test_netem_is_real PASSED" in out.stdout, log
    assert "test_fails FAILED" in out.stdout and "deliberate failure" in out.stdout, log
    # The modules load in one modprobe; a failure is named alone, and the others still load (netem).
    assert "tcpnet-vm: could not load kernel modules: tcpnet_no_such_module\n" in out.stderr, log
    if "fast boot:" in out.stderr:  # the host decoded the pcap and drew three plots for the guest
        assert "test_host_does_the_analysis PASSED" in out.stdout, log
        assert "the host decoded pcaps and drew plots for the guest: 4 host calls" in out.stderr, log
        assert "the guest asked for the host's CPU load 2 times (at each measurement's start and end)" in out.stderr, (
            log
        )
    assert "Power down" not in out.stderr, log

    guest = json.loads((proj / "guest.json").read_text())
    assert guest["release"] == vm_kernel.release != os.uname().release
    assert guest["in_vm"] == "1" and guest["token"] == "tok en'1"
    assert guest["accel"] == ACCEL  # what software_emulated() reads
    assert guest["ifaces"] == ["lo"]  # no network device in the VM
    assert not [a for a in guest["argv"] if a.startswith("--tcpnet-")], guest["argv"]
    assert guest["argv"][-2:] == ["-k", "forwarded or netem or fails or host"]
    if "fast boot:" in out.stderr:
        # The code the guest imports comes through the cached read-only root; the cwd stays a
        # read-write, uncached share (the host reads what the guest writes there).
        # (6.1 lists the cache mode as a bare word, "loose"; later kernels as "cache=loose" or, 6.12, as the
        # mode's bits: "cache=0xf", CACHE_SC_LOOSE.)
        loose = {"loose", "cache=loose", "cache=0xf"}
        package_options = guest["package_mount"][1].split(",")
        assert "ro" in package_options and loose & set(package_options), guest
        cwd_options = guest["cwd_mount"][1].split(",")
        assert guest["cwd_mount"][0] == str(proj) and "rw" in cwd_options, guest
        assert not loose & set(cwd_options), guest

    cases = {c.get("name"): c for c in ElementTree.parse(junit).getroot().iter("testcase")}
    assert set(cases) == {"test_forwarded", "test_netem_is_real", "test_host_does_the_analysis", "test_fails"}
    assert cases["test_fails"].find("failure") is not None
    assert not _qemus_in(proj)


def test_vm_session_refuses_while_another_holds_the_lock(tmp_path, vm_kernel, lock_dir):
    """No VM boots while another session holds the host's VM lock: it waits, names it, gives up."""
    proj = _project(tmp_path, "def test_never_runs():\n    pass\n")
    with lock.VMLock(directory=lock_dir):
        out = _pytest(
            proj,
            ["--tcpnet-vm", "--tcpnet-vm-accel=tcg", "--tcpnet-vm-lock-timeout=1"],
            timeout=120,
            env=_env(TCPNET_VM_LOCK_DIR=str(lock_dir)),
        )
    assert out.returncode == 3, out.stderr
    assert f"waiting for the VM lock held by pid {os.getpid()}" in out.stderr
    assert "gave up after 1 s" in out.stderr and "booting" not in out.stderr
    assert not _qemus_in(proj)


@pytest.mark.tcpnet_vm_boot
def test_boot_deadline_kills_the_vm(tmp_path, vm_kernel):
    proj = _project(tmp_path, "def test_never_runs():\n    pass\n")
    t0 = time.monotonic()
    # 0.5 s: a fast boot reaches its first command in ~3 s, so 3 s would be a race.
    out = _pytest(proj, ["--tcpnet-vm", "--tcpnet-vm-accel=tcg", "--tcpnet-vm-boot-timeout=0.5"], timeout=120)
    assert out.returncode == 3, out.stderr
    assert "guest did not start within 0.5 s under TCG" in out.stderr
    assert "VM killed" in out.stderr and "--tcpnet-vm-boot-timeout" in out.stderr
    assert time.monotonic() - t0 < 60
    assert not _qemus_in(proj)


@pytest.mark.tcpnet_vm_boot
def test_boot_failure_shows_qemu_output(tmp_path, vm_kernel):
    bogus = tmp_path / f"vmlinuz-{vm_kernel.release}"  # the release's modules exist
    bogus.write_bytes(os.urandom(4096))
    proj = _project(tmp_path, "def test_never_runs():\n    pass\n")
    out = _pytest(proj, ["--tcpnet-vm", "--tcpnet-vm-accel=tcg", f"--tcpnet-kernel={bogus}"], timeout=120)
    assert out.returncode == 3, out.stderr
    assert "exited" in out.stderr and "before the guest started" in out.stderr
    assert "Last lines of its output" in out.stderr and "qemu" in out.stderr
    assert "does not look like a bootable kernel image" in out.stderr
    assert not _qemus_in(proj)


@pytest.mark.tcpnet_vm_boot
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGKILL], ids=["ctrl-c", "sigkill"])
def test_killing_the_host_session_stops_the_vm(tmp_path, vm_kernel, sig):
    """Ctrl-C stops the VM and exits 2; even SIGKILL of pytest leaves no qemu behind."""
    proj = _project(tmp_path, "def test_slow():\n    import time; time.sleep(600)\n")
    proc = _popen(proj, ["--tcpnet-vm", "--tcpnet-vm-accel=tcg"])
    try:
        assert _wait_for(lambda: _qemus_in(proj), 60), "qemu never started"
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    if sig == signal.SIGINT:
        assert proc.returncode == 2 and "interrupted; VM stopped" in err, err
        assert not _qemus_in(proj)
    else:
        # The watchdog notices its launcher is gone: SIGTERM, then SIGKILL 3 s later.
        assert _wait_for(lambda: not _qemus_in(proj), 20), "orphaned qemu still running"
    # The runner's temporary directory (guest script, exit code) is removed either way.
    assert _wait_for(lambda: not _workdirs_for(proj), 10), _workdirs_for(proj)


@pytest.mark.tcpnet_vm_boot
def test_auto_accel_probes_once_then_uses_the_cache(tmp_path, vm_kernel):
    proj = _project(tmp_path, "def test_quick():\n    pass\n")
    env = _env(XDG_CACHE_HOME=str(tmp_path / "cache"), TCPNET_VM_KVM_PROBE_TIMEOUT="10")
    # A boot timeout this short stops the session right after the accel choice.
    opts = ["--tcpnet-vm", "--tcpnet-vm-accel=auto", "--tcpnet-vm-boot-timeout=1"]
    first = _pytest(proj, opts, timeout=120, env=env)
    assert "tcpnet-vm: backend=" in first.stderr, first.stderr
    usable, why = accel.kvm_usable()
    if not usable:
        assert why in first.stderr
        return
    assert "probing KVM" in first.stderr and "cached in" in first.stderr
    cache = json.loads((tmp_path / "cache" / "pytest-tcpnet" / "vm-accel.json").read_text())
    assert [e["accel"] for e in cache.values()] in (["kvm"], ["tcg"])
    second = _pytest(proj, opts, timeout=120, env=env)
    assert "probing KVM" not in second.stderr and "auto, cached" in second.stderr, second.stderr
    assert not _qemus_in(proj) and not _qemus_in(Path(os.path.realpath("/tmp")))


def test_console_filter_drops_power_down_split_across_reads():
    from pytest_tcpnet.vm.launch import _ConsoleFilter

    f = _ConsoleFilter()
    chunks = [
        b"err 1\n",
        b"[  194.2",
        b"11132] reboot: Po",
        b"wer down\r\n",
        b"partial",
        b" line\n[ 1.0] kept\n",
        b"[ 2.0] tail",
    ]
    out = b"".join(f.feed(c) for c in chunks) + f.flush()
    assert out == b"err 1\npartial line\n[ 1.0] kept\n[ 2.0] tail"


ELSEWHERE_TESTS = """
from pytest_tcpnet import Link

def test_passes(tcpnet):
    assert tcpnet.pair(link=Link(rate="20mbit")).transfer(nbytes=200_000).nbytes == 200_000

def test_fails_with_artifacts(tcpnet):
    result = tcpnet.pair(link=Link(rate="20mbit")).transfer(nbytes=200_000)
    assert result.throughput_bps > 1e9, "deliberate failure"
"""


@pytest.mark.tcpnet_vm_boot
def test_a_rootdir_above_the_working_directory_gets_its_artifacts_back(tmp_path, vm_kernel):
    """Issue 24: `cd ~/proj && pytest --tcpnet-vm ~/other/checks/test_vm.py`, no configuration file: the rootdir is
    their common ancestor, above the cwd; its tcpnet-artifacts/ must be shared read-write with the guest."""
    proj, checks = tmp_path / "proj", tmp_path / "other" / "checks"
    proj.mkdir()
    checks.mkdir(parents=True)
    (checks / "test_vm.py").write_text(ELSEWHERE_TESTS)
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            "--tcpnet-vm",
            "--tcpnet-kernel",
            vm_kernel.release,
            f"--tcpnet-vm-accel={ACCEL}",
            "--tcpnet-vm-boot-timeout",
            "240",
            "-rA",
            str(checks / "test_vm.py"),
        ],
        cwd=proj,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=900,
    )
    log = f"--- stdout\n{out.stdout}\n--- stderr\n{out.stderr}"
    assert out.returncode == 1, log
    assert f"rootdir: {tmp_path}" in out.stdout, log  # the scenario: the rootdir is above the cwd
    assert (
        "1 failed, 1 passed" in out.stdout
        and "deliberate failure" in out.stdout
        and "error" not in out.stdout.splitlines()[-1]
    ), log
    kept = list((tmp_path / "tcpnet-artifacts").iterdir())
    assert [d.name.startswith("other_checks_test_vm.py-test_fails_with_artifacts") for d in kept] == [True], kept
    assert (kept[0] / "flows.json").exists() and list(kept[0].glob("*.png")), list(kept[0].iterdir())


def _may_raise_priority():
    """True where this process may lower a nice value (CAP_SYS_NICE of the initial user namespace: root, not rootless)."""
    probe = subprocess.run(
        [sys.executable, "-c", "import os; os.setpriority(os.PRIO_PROCESS, 0, -1)"], capture_output=True
    )
    return probe.returncode == 0


def test_the_emulator_starts_ahead_of_other_sessions(tmp_path):
    # launch() runs any command the way it runs qemu: the command, forked by the watchdog in a
    # session of its own, gets the nice value asked for, and so does that session's autogroup (with
    # autogroups, a session's share of the CPU ignores its threads' nice: a hog elsewhere took half).
    # Without the privilege (rootless: euid 0 inside a user namespace, but nice is not namespaced) it
    # keeps the launcher's priority, and the launch goes on.
    from pytest_tcpnet.vm.launch import launch

    out = tmp_path / "out"
    script = f"echo READY; (nice; cat /proc/self/autogroup 2>/dev/null || echo none) > {out}"
    result = launch(["sh", "-c", script], cwd=str(tmp_path), sentinel=b"READY", boot_timeout=30, echo=False, nice=-7)
    assert result.started and result.returncode == 0
    nice, autogroup = out.read_text().split("\n", 1)
    expected = -7 if _may_raise_priority() else os.getpriority(os.PRIO_PROCESS, 0)
    assert int(nice) == expected == result.nice
    if autogroup.strip() != "none" and expected == -7:
        assert autogroup.split()[-1] == "-7", autogroup


def test_a_bad_emulator_nice_is_refused(monkeypatch):
    monkeypatch.setenv("TCPNET_VM_NICE", "-30")
    with pytest.raises(ValueError, match="TCPNET_VM_NICE: expected an integer nice value in -20..19"):
        runner.emulator_nice()
    monkeypatch.setenv("TCPNET_VM_NICE", "0")
    assert runner.emulator_nice() == 0
    monkeypatch.delenv("TCPNET_VM_NICE")
    assert runner.emulator_nice() == runner.EMULATOR_NICE == -10


def test_each_kernel_s_session_keeps_its_own_report_files():
    args = ["-m", "x", "--junitxml=test-results/vm.xml", "--report-log", "log.jsonl", "--junit-xml", "a", "examples"]
    assert runner.per_kernel_reports(args, "6.12.95+deb12-amd64") == [
        "-m",
        "x",
        "--junitxml=test-results/vm-6.12.95+deb12-amd64.xml",
        "--report-log=log-6.12.95+deb12-amd64.jsonl",
        "--junit-xml=a-6.12.95+deb12-amd64",
        "examples",
    ]


def test_several_kernels_run_in_turn_and_end_with_one_table_and_the_first_failing_code(tmp_path, monkeypatch, capsys):
    """run_kernels without a boot: each kernel's session (a stand-in for run_plan that writes the flows a real
    guest's results file holds) gets its own report names and results file; one merged table, every kernel's
    exit code, the user's --tcpnet-results with both kernels' flows, and the first failing code returned."""
    from pytest_tcpnet import Host, Link
    from pytest_tcpnet.report import flow_rows
    from pytest_tcpnet.workload.fake import fake_result

    kernels = [
        backend.Target(r, uml.kernel_line(r), kernel.Kernel(f"/boot/vmlinuz-{r}", r, f"/lib/modules/{r}"))
        for r in ("6.1.0-56-amd64", "6.12.117+deb12-amd64")
    ]
    user_args = ["--junitxml=test-results/vm.xml", "--tcpnet-results=mine.jsonl", "-m", "needs_netem", "examples"]
    monkeypatch.setattr(
        runner, "plan_from_config", lambda config, t: _plan(tmp_path, target=t, pytest_args=list(user_args))
    )
    seen = []

    def session(plan):
        seen.append(plan)
        results = next(a.partition("=")[2] for a in plan.pytest_args if a.startswith("--tcpnet-results="))
        assert os.path.dirname(results) in plan.shares  # the guest can write it
        bps = {"6.1.0-56-amd64": 4.82e6, "6.12.117+deb12-amd64": 5.77e6}[plan.kernel.release]
        result = fake_result(
            nbytes=int(bps * 2 / 8),
            duration_s=2.0,
            kernel=plan.kernel.release,
            link=Link(rate="50mbit", rtt="100ms"),
            client=Host(),
            workload="bulk",
        )
        with open(results, "w", encoding="utf-8") as out:
            out.writelines(json.dumps(row) + "\n" for row in flow_rows([result], test="t.py::t", outcome="passed"))
        return 0 if plan.kernel.release.startswith("6.1.") else 1

    monkeypatch.setattr(runner, "run_plan", session)
    config = _Config(tcpnet_results="merged.jsonl")
    config.invocation_params = argparse.Namespace(dir=tmp_path)
    assert runner.run_kernels(config, kernels) == 1
    assert [p.kernel.release for p in seen] == ["6.1.0-56-amd64", "6.12.117+deb12-amd64"]
    assert "--junitxml=test-results/vm-6.12.117+deb12-amd64.xml" in seen[1].pytest_args
    assert "--tcpnet-results=mine.jsonl" not in seen[0].pytest_args
    out = capsys.readouterr().out
    assert "kernel 6.1.0-56-amd64 (1 of 2)" in out and out.index("(1 of 2)") < out.index("(2 of 2)")
    table = out[out.index("2 flow(s) under 2 kernels") :]
    assert "6.1.0-56-amd64: cc" in table and "6.12.117+deb12-amd64 / 6.1.0-56-amd64" in table
    assert "4.82 Mbit/s" in table and "5.77 Mbit/s" in table and "1.20" in table
    assert "kernel 6.1.0-56-amd64: pytest exited with 0" in out
    assert "kernel 6.12.117+deb12-amd64: pytest exited with 1" in out
    merged = [json.loads(line) for line in (tmp_path / "merged.jsonl").read_text().splitlines()]
    assert [row["kernel"] for row in merged] == ["6.1.0-56-amd64", "6.12.117+deb12-amd64"]
    assert not any(
        os.path.exists(os.path.dirname(a.partition("=")[2]))
        for p in seen
        for a in p.pytest_args
        if a.startswith("--tcpnet-results=")
    )  # the collecting directory is gone


def test_an_interrupted_kernel_stops_the_run_before_the_next_boots(tmp_path, monkeypatch, capsys):
    kernels = [
        backend.Target(r, uml.kernel_line(r), kernel.Kernel(f"/boot/vmlinuz-{r}", r, f"/lib/modules/{r}"))
        for r in ("6.1.0-56-amd64", "6.12.1")
    ]
    monkeypatch.setattr(runner, "plan_from_config", lambda config, t: _plan(tmp_path, target=t, pytest_args=[]))
    booted = []
    monkeypatch.setattr(runner, "run_plan", lambda plan: booted.append(plan.kernel.release) or runner.EXIT_INTERRUPTED)
    config = _Config()
    config.invocation_params = argparse.Namespace(dir=tmp_path)
    assert runner.run_kernels(config, kernels) == runner.EXIT_INTERRUPTED
    assert booted == ["6.1.0-56-amd64"]
    assert "kernel 6.1.0-56-amd64: pytest exited with 2" in capsys.readouterr().out


def test_xdist_workers_under_the_vm_are_warned_about(capsys):
    """`pytest -n 2 --tcpnet-vm` passes -n into the guest, where the workers share its CPUs: the runner says so
    before it boots anything (here a kernel that does not exist ends the run right after)."""
    from types import SimpleNamespace

    from pytest_tcpnet.vm.runner import run_config_in_vm

    options = {"numprocesses": 2, "tcpnet_vm_kernel": "/nonexistent/vmlinuz"}
    config = SimpleNamespace(getoption=lambda name, default=None: options.get(name, default))
    code = run_config_in_vm(config)
    err = capsys.readouterr().err
    assert code != 0 and "warning: -n 2 starts xdist workers inside the guest" in err, err
    assert "Drop -n for --tcpnet-vm" in err
