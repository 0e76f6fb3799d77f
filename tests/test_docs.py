"""Docs that cannot drift: every Python block in README.md and docs/*.md runs here, and the names they cite exist.

Each block is a test. A block's own `test_*` functions are called with the `tcpnet` fixture (their
`tcpnet_needs` marks become this case's marks, so skips, strictness and the VM session's selection
treat them as any test's); a block without tests runs as written, with the names a fragment takes
for granted (`pair`: a fresh 50 Mbit/s path; `result`: a transfer on it) and the imports of the
file's earlier blocks, as a reader who follows the page has them. The downstream page's abridged
test is checked line by line against the downstream project's real file, which dev/downstream runs.
"""

import ast
import importlib
import os
import re
import shutil
import sys

import pytest

import pytest_tcpnet

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PAGES = ["README.md"] + sorted(
    f"docs/{name}" for name in os.listdir(os.path.join(ROOT, "docs")) if name.endswith(".md")
)
USERAPP = os.path.join(ROOT, "tests", "userapp.py")
BLOCK = re.compile(r"^(?:<!-- tcpnet_needs: ([a-z0-9_, ]+) -->\n)?```python\n(.*?)^```", re.M | re.S)


def _blocks():
    """[(page, index, code, needs)] of every ```python block, in page order; needs: what an HTML comment right above
    the block declares (`<!-- tcpnet_needs: netem -->`), for a block that is not a test of its own."""
    found = []
    for page in PAGES:
        with open(os.path.join(ROOT, page), encoding="utf-8") as f:
            text = f.read()
        found += [
            (page, index, match.group(2), [n.strip() for n in (match.group(1) or "").split(",") if n.strip()])
            for index, match in enumerate(BLOCK.finditer(text))
        ]
    return found


def _needs(tree, declared=()):
    """The tcpnet_needs(...) arguments the decorators in tree declare (string literals), and the page's declared."""
    needs = list(declared)
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "tcpnet_needs":
            needs += [arg.value for arg in node.args if isinstance(arg, ast.Constant)]
    return needs


def _cases():
    cases = []
    for page, index, code, declared in _blocks():
        tree = ast.parse(code)
        tests = [node for node in tree.body if isinstance(node, ast.FunctionDef) and node.name.startswith("test_")]
        for test in tests or [None]:  # a case per test function, with its own needs; one for a block without
            needs = _needs(test or tree, declared)
            marks = [pytest.mark.tcpnet_needs(*needs)] if needs else []
            name = test.name if test else None
            cases.append(
                pytest.param(page, index, code, name, id=f"{page}#{index}" + (f"::{name}" if name else ""), marks=marks)
            )
    return cases


def _earlier_imports(page, index):
    """The import statements of the page's blocks before this one, as one piece of code."""
    lines = []
    for other_page, other_index, code, _ in _blocks():
        if other_page == page and other_index < index:
            lines += [
                ast.unparse(node) for node in ast.parse(code).body if isinstance(node, (ast.Import, ast.ImportFrom))
            ]
    return "\n".join(lines)


@pytest.mark.parametrize("page, index, code, test", _cases())
def test_the_block_runs(page, index, code, test, request, tmp_path, monkeypatch):
    if page == "docs/downstream.md":  # a page about another project: its code is checked against that project
        _check_abridged(code)
        return
    tree = ast.parse(code)
    tests = [node.name for node in tree.body if isinstance(node, ast.FunctionDef) and node.name.startswith("test_")]
    loaded = {node.id for node in ast.walk(tree) if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load)}
    # A reader's project: their program (myapp.py, MYAPP) beside the test, paths relative to the repository's root.
    shutil.copy(USERAPP, tmp_path / "myapp.py")
    monkeypatch.chdir(ROOT)
    namespace = {"__name__": f"docs_{index}", "sys": sys, "MYAPP": str(tmp_path / "myapp.py")}
    exec(compile(_earlier_imports(page, index), f"{page} (earlier imports)", "exec"), namespace)
    uses_lab = bool(tests) or bool({"pair", "result", "tcpnet"} & loaded)
    if uses_lab:
        tcpnet = request.getfixturevalue("tcpnet")
        namespace["tcpnet"] = tcpnet
        if {"pair", "result"} & loaded and not tests:
            from pytest_tcpnet import Link

            namespace["pair"] = tcpnet.pair(link=Link(rate="50mbit"))
            namespace["result"] = namespace["pair"].transfer(nbytes=1_000_000)
    if "myapp.py" in code:
        monkeypatch.chdir(tmp_path)
    exec(compile(code, f"{page} block {index}", "exec"), namespace)
    if test is not None:
        namespace[test](tcpnet=namespace["tcpnet"])


def _check_abridged(code):
    """The page's abridged test is the downstream project's own code (the file dev/downstream runs): each function
    it shows is in downstream/tests/test_chunkup.py exactly as shown, and each name it imports is imported there."""
    with open(os.path.join(ROOT, "downstream", "tests", "test_chunkup.py"), encoding="utf-8") as f:
        real = ast.parse(f.read())
    shown = ast.parse(code)
    real_functions = {node.name: ast.unparse(node) for node in real.body if isinstance(node, ast.FunctionDef)}
    real_imports = {
        alias.name for node in real.body if isinstance(node, (ast.Import, ast.ImportFrom)) for alias in node.names
    }
    for node in shown.body:
        if isinstance(node, ast.FunctionDef):
            assert ast.unparse(node) == real_functions.get(node.name), (
                f"docs/downstream.md shows {node.name} unlike downstream/tests/test_chunkup.py"
            )
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            missing = {alias.name for alias in node.names} - real_imports
            assert not missing, f"docs/downstream.md imports {missing}, which downstream/tests/test_chunkup.py does not"


# `pytest_tcpnet.x.y` and `assert_*` names written in the docs' prose.
DOTTED = re.compile(r"`(pytest_tcpnet(?:\.[A-Za-z_][A-Za-z0-9_]*)+)")
ASSERTION = re.compile(r"`(assert_[a-z_]+)[(`]")


def test_every_name_the_docs_cite_exists():
    """A dotted name under pytest_tcpnet resolves (module, or attribute of one); an assert_* name is exported."""
    missing = []
    for page in PAGES:
        with open(os.path.join(ROOT, page), encoding="utf-8") as f:
            text = f.read()
        for dotted in set(DOTTED.findall(text)):
            if not _resolves(dotted):
                missing.append(f"{page}: {dotted}")
        for name in set(ASSERTION.findall(text)):
            if not hasattr(pytest_tcpnet, name):
                missing.append(f"{page}: {name}")
    assert not missing, missing


def _resolves(dotted):
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        try:
            for attribute in parts[cut:]:
                obj = getattr(obj, attribute)
        except AttributeError:
            return False
        return True
    return False
