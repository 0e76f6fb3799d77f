"""The sdist and wheel build from this tree, pass `twine check`, and the wheel holds the whole package.

dev/downstream goes further (installs the wheel in a fresh virtualenv and runs a user's project);
this test is the quick check of contents and metadata. It needs the `test` extra (build, twine).
"""

import subprocess
import sys
import zipfile
from email.parser import Parser
from pathlib import Path

import pytest

from pytest_tcpnet import rootless

# Building writes pytest_tcpnet.egg-info into the checkout, which a rootless run's user may not write.
pytestmark = pytest.mark.skipif(rootless.inside(), reason="root-only: building writes into the checkout")

REPO = Path(__file__).resolve().parent.parent
PACKAGE = REPO / "pytest_tcpnet"

pytest.importorskip("build", reason="needs the test extra: pip install -e '.[test]' (dev/setup does)")
pytest.importorskip("twine", reason="needs the test extra: pip install -e '.[test]' (dev/setup does)")


@pytest.fixture(scope="module")
def dist(tmp_path_factory):
    """Build the sdist, then the wheel from it (as `python -m build` does), into a fresh directory."""
    outdir = tmp_path_factory.mktemp("dist")
    out = subprocess.run(
        [sys.executable, "-m", "build", "--outdir", str(outdir), str(REPO)], capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    return outdir


def source_files():
    """Every file of the package in the source tree, as a wheel names it (no bytecode)."""
    return {
        path.relative_to(REPO).as_posix()
        for path in PACKAGE.rglob("*")
        if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc"
    }


def wheel_of(dist):
    (wheel,) = dist.glob("pytest_tcpnet-*.whl")
    return zipfile.ZipFile(wheel)


def test_wheel_holds_every_file_of_the_package(dist):
    names = set(wheel_of(dist).namelist())
    package_files = {name for name in names if name.startswith("pytest_tcpnet/")}
    assert package_files == source_files()
    # Run by path rather than imported: a wheel without them breaks transfers and VM runs.
    assert {"pytest_tcpnet/workload/bulk.py", "pytest_tcpnet/vm/_watchdog.py"} <= package_files
    # Nothing of the repository's own: tests, examples, the downstream project stay out.
    assert not [name for name in names if name.split("/")[0] in ("tests", "examples", "downstream", "dev")]
    # The public API carries no annotations, so the package does not claim PEP 561 typing.
    assert "pytest_tcpnet/py.typed" not in names


def test_wheel_registers_the_plugin_and_its_extras(dist):
    wheel = wheel_of(dist)
    info = next(name.rsplit("/", 1)[0] for name in wheel.namelist() if name.endswith(".dist-info/METADATA"))
    entry_points = wheel.read(f"{info}/entry_points.txt").decode()
    assert "[pytest11]\ntcpnet = pytest_tcpnet.plugin" in entry_points
    metadata = Parser().parsestr(wheel.read(f"{info}/METADATA").decode())
    assert {"vm", "plots", "iperf3", "hypothesis", "parallel", "shard", "all", "test"} <= set(
        metadata.get_all("Provides-Extra")
    )
    requires = metadata.get_all("Requires-Dist")
    for requirement in (
        'virtme-ng>=1.30; extra == "vm"',
        'matplotlib>=3.5; extra == "plots"',
        'iperf3>=0.1.11; extra == "iperf3"',
        "pyroute2>=0.9.2",
        "pytest>=7.0",
    ):
        assert requirement in requires, requires
    everything = {r.split(";")[0] for r in requires if 'extra == "all"' in r}
    assert everything == {
        "virtme-ng>=1.30",
        "zstandard>=0.22",
        "matplotlib>=3.5",
        "iperf3>=0.1.11",
        "hypothesis>=6.0",
        "pytest-xdist>=3.0",
        "pytest-split>=0.9",
    }  # no build/twine
    # Every extra a user's project may use is in "all" (a new user's 6.12 lost fast boot without zstandard).
    for extra in ("vm", "plots", "iperf3", "hypothesis", "parallel", "shard"):
        assert {r.split(";")[0] for r in requires if f'extra == "{extra}"' in r} <= everything, extra
    assert metadata["Description-Content-Type"] == "text/markdown"


def test_sdist_holds_the_package_and_the_wheel_from_it_passes_twine_check(dist):
    (sdist,) = dist.glob("pytest_tcpnet-*.tar.gz")
    import tarfile

    with tarfile.open(sdist) as archive:
        names = {name.split("/", 1)[1] for name in archive.getnames() if "/" in name}
    assert {"pyproject.toml", "README.md"} <= names
    assert source_files() <= names
    out = subprocess.run(
        [sys.executable, "-m", "twine", "check", "--strict", *map(str, dist.iterdir())],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0 and out.stdout.count("PASSED") == 2, out.stdout + out.stderr
