"""The GitHub Actions workflow and the downstream CI snippet parse, and everything they run exists here."""

import re
import subprocess
from pathlib import Path

import pytest

yaml = pytest.importorskip("yaml", reason="needs the test extra (pyyaml): pip install -e '.[test]'")

REPO = Path(__file__).resolve().parent.parent
WORKFLOW = REPO / ".github" / "workflows" / "ci.yml"
# A path into this repository as a shell command names it.
REPO_PATH = re.compile(r"(?<![\w/$.-])((?:\.ci|dev|downstream|benchmarks|tests|examples|docs)/[\w./-]*\w)")


def load(text):
    document = yaml.safe_load(text)
    # YAML 1.1 reads the key `on` as True.
    document["on"] = document.pop(True, document.get("on"))
    return document


def steps(document):
    return [step for job in document["jobs"].values() for step in job["steps"]]


def shell_scripts(document):
    return [step["run"] for step in steps(document) if "run" in step]


@pytest.fixture(scope="module")
def workflow():
    return load(WORKFLOW.read_text())


def test_workflow_parses_and_states_its_time_budget(workflow):
    assert workflow["on"] and workflow["jobs"]
    for name, job in workflow["jobs"].items():
        assert job["runs-on"].startswith("ubuntu"), name
        assert 0 < job["timeout-minutes"] <= 60, f"{name}: the project's CI budget is 60 minutes"


def test_every_script_the_workflow_runs_exists_and_is_valid_bash(workflow):
    scripts = shell_scripts(workflow)
    named = {path for script in scripts for path in REPO_PATH.findall(script)}
    assert ".ci/run" in named
    for path in named:
        assert (REPO / path).exists(), f"the workflow runs {path}, which is not in the repository"
    for script in scripts:
        check = subprocess.run(["bash", "-n", "-c", script], capture_output=True, text=True)
        assert check.returncode == 0, f"{script!r}: {check.stderr}"


def test_workflow_runs_what_ci_runs_with_netem_and_keeps_artifacts(workflow):
    script = "\n".join(shell_scripts(workflow))
    assert "linux-modules-extra-$(uname -r)" in script and "modprobe sch_netem" in script
    assert "dev/test" in (REPO / ".ci" / "run").read_text()
    dev_test = (REPO / "dev" / "test").read_text()
    # The variables the workflow sets are the ones dev/test reads: -n auto, the pinned VM kernel.
    assert workflow["jobs"]["suite"]["env"]["TCPNET_WORKERS"] == "auto" and "TCPNET_WORKERS" in dev_test
    assert "TCPNET_KERNEL=" in script and "kernel=${TCPNET_KERNEL:-6.1}" in dev_test
    assert '--tcpnet-kernel="${TCPNET_KERNEL:-all}"' in dev_test  # the examples under every kernel
    assert "--tcpnet-vm" in dev_test and "bash dev/downstream" in dev_test
    (upload,) = [
        step
        for step in steps(workflow)
        if step.get("uses", "").startswith("actions/upload-artifact") and step.get("if") == "failure()"
    ]
    assert {"tcpnet-artifacts/", "test-results/"} <= set(upload["with"]["path"].split())
    assert "test-results/" in dev_test


def _valid_workflow(path):
    """check-jsonschema against GitHub's workflow schema (vendored in the package: no network)."""
    import shutil
    import sys

    tool = shutil.which("check-jsonschema", path=str(Path(sys.executable).parent)) or shutil.which("check-jsonschema")
    if tool is None:
        pytest.skip("needs the test extra (check-jsonschema): pip install -e '.[test]'")
    out = subprocess.run(
        [tool, "--builtin-schema", "vendor.github-workflows", str(path)], capture_output=True, text=True
    )
    assert out.returncode == 0, out.stdout + out.stderr


def test_the_workflow_is_valid_for_github_and_merges_every_shard_of_every_kernel(workflow):
    _valid_workflow(WORKFLOW)
    suite, report = workflow["jobs"]["suite"], workflow["jobs"]["report"]
    shards = suite["strategy"]["matrix"]["shard"]
    assert shards == list(range(1, len(shards) + 1)) and len(shards) >= 2
    assert suite["env"]["TCPNET_SHARD"] == "${{ matrix.shard }}/" + str(len(shards))
    assert len(suite["strategy"]["matrix"]["kernel"]) >= 2 and suite["strategy"]["fail-fast"] is False
    assert "TCPNET_SHARD" in "\n".join(shell_scripts({"jobs": {"suite": suite}}))  # passed through sudo
    (keep,) = [step for step in suite["steps"] if step.get("with", {}).get("name", "").startswith("results-")]
    assert keep["if"] == "always()" and keep["with"]["path"] == "test-results/"
    assert report["needs"] == "suite" and report["if"] == "always()"
    (download,) = [step for step in report["steps"] if step.get("uses", "").startswith("actions/download-artifact")]
    assert download["with"]["pattern"] == "results-*"
    merge = "\n".join(shell_scripts({"jobs": {"report": report}}))
    assert "pytest_tcpnet.report merge --markdown results/*/*.jsonl" in merge and "GITHUB_STEP_SUMMARY" in merge
    dev_test = (REPO / "dev" / "test").read_text()
    assert "TCPNET_SHARD" in dev_test and "--splits" in dev_test and (REPO / ".test_durations").is_file()


def test_downstream_ci_snippets_are_valid_workflows_and_run_pytest_as_root(tmp_path):
    text = (REPO / "docs" / "downstream.md").read_text()
    snippets = re.findall(r"```yaml\n(.*?)```", text, re.S)
    assert len(snippets) == 2, "the plain workflow and the sharded one"
    for number, snippet in enumerate(snippets):
        (tmp_path / f"w{number}.yml").write_text(snippet)
        _valid_workflow(tmp_path / f"w{number}.yml")
        document = load(snippet)
        script = "\n".join(shell_scripts(document))
        assert "modprobe sch_netem" in script and "python3 -m venv" in script
        assert "sudo .venv/bin/python -m pytest" in script
        for run in shell_scripts(document):
            assert subprocess.run(["bash", "-n", "-c", run]).returncode == 0
    sharded = load(snippets[1])
    assert "--splits" in "\n".join(shell_scripts(sharded)) and "pytest_tcpnet.report merge" in snippets[1]


def test_flakes_tallies_junit_files_made_elsewhere(tmp_path):
    import sys

    case = '<testcase classname="tests.test_a" name="{name}">{body}</testcase>'
    for run, body in (("1", ""), ("2", '<failure message="x"/>')):
        (tmp_path / f"run{run}.xml").write_text(
            f"<testsuites><testsuite>{case.format(name='test_steady', body='')}"
            f"{case.format(name='test_flaky', body=body)}</testsuite></testsuites>"
        )
    out = subprocess.run(
        [sys.executable, str(REPO / "dev" / "flakes"), "--tally", *sorted(map(str, tmp_path.iterdir()))],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 1, out.stderr
    assert "flakes: 2 tests, 1 failed at least once\n  tests.test_a::test_flaky: 1 failed, 1 passed" in out.stdout


@pytest.mark.parametrize("shard", ["3/2", "0/4", "x", "1/"])
def test_dev_test_refuses_a_bad_shard_before_setting_anything_up(shard):
    """TCPNET_SHARD=i/N with 1 <= i <= N, or dev/test says so and stops before dev/setup installs anything."""
    import os

    out = subprocess.run(
        ["bash", str(REPO / "dev" / "test")],
        env=dict(os.environ, TCPNET_SHARD=shard),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 2, out.stdout + out.stderr
    assert f"TCPNET_SHARD must be i/N with 1 <= i <= N (e.g. 2/4), got '{shard}'" in out.stderr
    assert out.stdout == "", out.stdout  # nothing ran: not dev/setup, not a session
