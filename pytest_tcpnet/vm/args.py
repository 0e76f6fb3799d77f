"""Pure helpers that turn the host invocation into the guest's: arguments, environment, shares."""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping, Sequence

from .errors import VMUsageError
from .options import FLAG_OPTIONS, VALUE_OPTIONS

# Environment carried into the guest (virtme-ng gives the guest a minimal one of its own).
ENV_NAMES = (
    "PATH",
    "PYTHONPATH",
    "HOME",
    "CI",
    "VIRTUAL_ENV",
    "TERM",
    "TZ",
    "LANG",
    "LC_ALL",
    "LC_CTYPE",
    "PYTHONHASHSEED",
    "PYTHONWARNINGS",
    "PYTHONUTF8",
    "PYTHONIOENCODING",
    "PYTHONDONTWRITEBYTECODE",
    "PY_COLORS",
    "NO_COLOR",
    "FORCE_COLOR",
    "COLUMNS",
)
ENV_PREFIXES = ("TCPNET_", "PYTEST_", "HYPOTHESIS_")
# Per-process state of the host session, meaningless (or harmful) in the guest's session.
ENV_EXCLUDED = ("PYTEST_CURRENT_TEST", "PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT", "PYTEST_XDIST_TESTRUNUID")

# virtme-ng joins its arguments into a shell command line without quoting, and qemu splits
# -fsdev/-kernel values on commas, so only plain paths survive the trip intact.
_SAFE_PATH = re.compile(r"^/[A-Za-z0-9_./+@%:-]*$")


def strip_vm_args(
    args: Sequence[str],
    flags: Iterable[str] = FLAG_OPTIONS,
    valued: Iterable[str] = VALUE_OPTIONS,
) -> list:
    """Return ``args`` without the VM options, in both ``--opt=value`` and ``--opt value`` forms."""
    flags, valued = set(flags), set(valued)
    out: list[str] = []
    i = 0
    while i < len(args):
        arg = args[i]
        name = arg.split("=", 1)[0]
        if arg == "--":  # everything after "--" is a positional argument, keep it verbatim
            out.extend(args[i:])
            break
        if name in flags:
            i += 1
        elif name in valued:
            i += 1 if "=" in arg else 2
        else:
            out.append(arg)
            i += 1
    return out


def guest_environment(host_env: Mapping[str, str], extra: Mapping[str, str] | None = None) -> dict:
    """Select the host variables the guest session needs and add ``extra`` on top."""
    env = {
        k: v for k, v in host_env.items() if (k in ENV_NAMES or k.startswith(ENV_PREFIXES)) and k not in ENV_EXCLUDED
    }
    env.update(extra or {})
    return env


def check_shareable(path: str, what: str) -> str:
    """Return ``path`` if virtme-ng can pass it to the guest, else raise a usage error."""
    if not _SAFE_PATH.match(path):
        raise VMUsageError(
            f"cannot share {what} {path!r} with the VM: virtme-ng passes paths through a "
            "shell and qemu unquoted, so use a path without spaces, commas, '=' or shell "
            "characters"
        )
    if path == "/":
        raise VMUsageError(f"refusing to share / read-write with the VM (as {what})")
    return path


def _inside(path: str, parent: str) -> bool:
    return path == parent or path.startswith(parent.rstrip("/") + "/")


def share_dirs(cwd: str, wanted: Iterable[str]) -> list:
    """Return the minimal list of directories to share rw: ``cwd`` first, then ``wanted`` not under it."""
    result = [os.path.realpath(cwd)]
    for d in wanted:
        d = os.path.realpath(d)
        if not any(_inside(d, kept) for kept in result):
            # A new directory that contains kept ones replaces them.
            result = [k for k in result if not _inside(k, d)] + [d]
    return result


def artifact_dirs(
    cwd: str,
    xmlpath: str | None = None,
    basetemp: str | None = None,
    artifacts: str | None = None,
    report_files: Sequence[str] = (),
    cache_dir: str | None = None,
) -> list:
    """Return the host directories the guest must write to: reports, basetemp's parent, the per-test
    artifacts directory and pytest's cache, each wherever it is (the rootdir may lie above ``cwd``)."""

    def absolute(p: str) -> str:
        return os.path.normpath(os.path.join(cwd, os.path.expanduser(p)))

    dirs = []
    for f in [xmlpath, *report_files]:
        if f:
            dirs.append(os.path.dirname(absolute(f)))
    if basetemp:
        # pytest deletes and re-creates basetemp itself, which fails on a mount point:
        # share its parent instead.
        dirs.append(os.path.dirname(absolute(basetemp)))
    for d in (artifacts, cache_dir):
        if d:
            dirs.append(absolute(d))
    return dirs
