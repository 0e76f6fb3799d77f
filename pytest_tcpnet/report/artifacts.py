"""Per-test artifact directories (pcaps, plots, the test's flows) kept or removed like pytest's tmp_path."""

import hashlib
import json
import os
import re
import shutil
from pathlib import Path

KEEP_CHOICES = ("failed", "all", "none")
FLOWS_FILE = "flows.json"
IMAGE_SUFFIXES = (".png", ".svg", ".jpg", ".jpeg")
_NAME_LIMIT = 120


def artifacts_root(config):
    """Where a session's per-test directories go: --tcpnet-artifacts (from the invocation directory), else
    tcpnet-artifacts/ under pytest's rootdir. The VM runner shares this directory read-write with the guest."""
    chosen = config.getoption("tcpnet_artifacts", default=None)
    if chosen is None:
        return Path(config.rootpath) / "tcpnet-artifacts"
    return Path(config.invocation_params.dir) / os.path.expanduser(chosen)


class ArtifactStore:
    """One directory per test under root; ``finish`` keeps or removes it according to ``keep``.

    keep: "failed" (default) keeps a failed test's directory, "all" keeps every one, "none"
    removes them all. A test's directory is emptied when the test starts, so a kept directory
    only ever holds what its last run wrote.
    """

    def __init__(self, root, keep="failed"):
        if keep not in KEEP_CHOICES:
            raise ValueError(f"keep: must be one of {', '.join(KEEP_CHOICES)}, got {keep!r}")
        self.root = Path(root)
        self.keep = keep

    def directory_for(self, nodeid):
        """A fresh, empty directory for this test (its previous run's one is removed first)."""
        path = self.root / directory_name(nodeid)
        if path.is_symlink() or path.is_file():
            path.unlink()
        elif path.exists():
            shutil.rmtree(path)
        path.mkdir(parents=True)
        return path

    def should_keep(self, failed):
        """Whether a test's directory survives, given whether the test failed."""
        return self.keep == "all" or (self.keep == "failed" and failed)

    def finish(self, path, *, failed):
        """Keep or remove a test's directory (an empty one always goes); returns True if it was kept."""
        path = Path(path)
        if self.should_keep(failed) and path.is_dir() and any(path.iterdir()):
            give_to_invoking_user(path, self.root)
            return True
        # The root stays: another xdist worker may be creating its own directory in it right now.
        shutil.rmtree(path, ignore_errors=True)
        return False


def give_to_invoking_user(path, root):
    """Under sudo, hand a kept directory (and the root above it) to the user who ran sudo: pcaps are written 0600
    by root's dumpcap, and a CI step that uploads artifacts runs as that user. Nothing else is touched."""
    from ..locks import in_user_namespace  # here: a session that keeps nothing never imports it

    uid, gid = os.environ.get("SUDO_UID"), os.environ.get("SUDO_GID")
    if os.geteuid() != 0 or in_user_namespace() or not uid or not gid or not uid.isdigit() or not gid.isdigit():
        return  # (root inside a rootless session's user namespace cannot give files to anyone)
    _chown(Path(root), int(uid), int(gid))
    for item in (Path(path), *Path(path).rglob("*")):
        if not item.is_symlink():
            _chown(item, int(uid), int(gid))


def _chown(path, uid, gid):
    try:
        os.chown(path, uid, gid)
    except OSError:
        pass  # a by-product: the artifacts stay root's, as before


def directory_name(nodeid):
    """A file name from a test id: readable, unique (a hash settles truncation), safe on every filesystem."""
    name = re.sub(r"[^\w.\-\[\]]+", "_", nodeid.replace("::", "-")).strip("_.") or "test"
    if len(name) > _NAME_LIMIT:
        name = name[: _NAME_LIMIT - 9] + "-" + hashlib.sha1(nodeid.encode()).hexdigest()[:8]
    return name


def write_flows(directory, rows):
    """Save a test's flows (full conditions and figures) beside its pcaps and plots; returns the path."""
    path = Path(directory) / FLOWS_FILE
    path.write_text(json.dumps(rows, indent=1, sort_keys=True, default=str) + "\n")
    return path


def list_artifacts(directory):
    """Every file under a test's directory, sorted."""
    directory = Path(directory)
    if not directory.is_dir():
        return []
    return sorted(p for p in directory.rglob("*") if p.is_file())


def images(paths):
    """The plots among artifact paths."""
    return [Path(p) for p in paths if str(p).lower().endswith(IMAGE_SUFFIXES)]


def explain_failure(results, directory, *, test, keep):
    """Plot a failed test's transfers into its directory and save its flows; return (report section or None, images).

    Plotting is best effort (no matplotlib, no capture): the reason is listed instead of the plot.
    """
    from ..results import LatencyResult, transfer_of
    from .rows import flow_rows

    # A window probe's transfer is in the results too: plot it once. Transfers and latency probes draw plots.
    problems, plotted = [], {id(p): p for p in (transfer_of(r) or r for r in results)}
    for result in plotted.values():
        if isinstance(result, LatencyResult) or transfer_of(result) is not None:
            try:
                result.plot(directory=directory)
            except Exception as exc:  # the test's own failure is what matters; say why there is no plot
                problems.append(f"no plot: {exc}")
    if results:
        write_flows(directory, flow_rows(results, test=test, outcome="failed"))
    paths = list_artifacts(directory)
    if not paths and not problems:
        return None, []
    return "\n".join([describe(directory, paths, keep), *dict.fromkeys(problems)]), images(paths)


def describe(directory, paths, keep):
    """The lines a failure report shows: where the artifacts are and what they are."""
    lines = [f"artifacts (--tcpnet-keep={keep}): {directory}"]
    lines += [f"  {os.path.relpath(p, directory)}" for p in paths]
    return "\n".join(lines)
