"""The package's layers hold (import-linter's contracts in pyproject.toml), and the zygote needs no pyroute2."""

import os
import re
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

BLOCK_PYROUTE2 = """
import sys
class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == "pyroute2":
            raise ImportError("pyroute2 is blocked in this test")
sys.meta_path.insert(0, Block())
from pytest_tcpnet.workload import flows, spawn
print(" ".join(sorted(m for m in sys.modules if m.startswith("pytest_tcpnet"))))
"""


def test_the_zygote_s_modules_import_without_pyroute2():
    """The forkserver preloads workload.flows and workload.spawn: stdlib and the pure model only."""
    done = subprocess.run([sys.executable, "-c", BLOCK_PYROUTE2], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert done.returncode == 0, done.stderr
    loaded = done.stdout.split()
    assert "pytest_tcpnet.workload.flows" in loaded and not any(m.startswith("pytest_tcpnet.netlink") for m in loaded)


def _lint_imports():
    found = shutil.which("lint-imports", path=os.path.dirname(sys.executable)) or shutil.which("lint-imports")
    if not found:
        pytest.skip("import-linter is not installed (pip install -e '.[test]')")
    return found


def test_the_layers_hold():
    """Every contract kept: no layer imports one above it, pyroute2 and hypothesis each have one importer, the model
    is pure, no package's modules import each other in a circle."""
    # --no-cache: an unprivileged session (the rootless re-run) cannot write import-linter's cache into the checkout.
    done = subprocess.run([_lint_imports(), "--no-cache"], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert re.search(r"Contracts: [1-9]\d* kept, 0 broken", done.stdout), done.stdout[-2000:]


def test_a_core_module_importing_the_vm_runner_breaks_the_layers(tmp_path):
    """The contracts can fail: a copy of the package where results imports the VM runner is reported broken."""
    copy = tmp_path / "pytest_tcpnet"
    shutil.copytree(os.path.join(ROOT, "pytest_tcpnet"), copy, ignore=shutil.ignore_patterns("__pycache__"))
    with open(copy / "results" / "transfer.py", "a", encoding="utf-8") as f:
        f.write("\nfrom ..vm import runner as _runner_breaks_the_layers  # noqa\n")
    shutil.copy(os.path.join(ROOT, "pyproject.toml"), tmp_path / "pyproject.toml")
    done = subprocess.run(
        [_lint_imports(), "--no-cache"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(tmp_path)},
    )
    assert done.returncode != 0 and "pytest_tcpnet.results.transfer -> pytest_tcpnet.vm.runner" in done.stdout, (
        done.stdout[-3000:]
    )


def test_lab_names_workload_modules_so_the_linter_sees_each_import():
    """The workload package's names load lazily (its __getattr__), so `from ..workload import Bulk` would hide an
    adapter from the contract 'lab/ names no workload': lab/ imports each name from the module that defines it."""
    import ast

    lab = os.path.join(ROOT, "pytest_tcpnet", "lab")
    through_the_package = []
    for name in sorted(os.listdir(lab)):
        if name.endswith(".py"):
            tree = ast.parse(open(os.path.join(lab, name), encoding="utf-8").read())
            through_the_package += [
                f"{name}:{node.lineno}"
                for node in ast.walk(tree)
                if isinstance(node, ast.ImportFrom)
                and (node.level, node.module) in ((2, "workload"), (0, "pytest_tcpnet.workload"))
            ]
    assert not through_the_package, f"import from the defining module (..workload.base, ...): {through_the_package}"
