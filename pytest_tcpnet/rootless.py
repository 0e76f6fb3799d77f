"""Labs without root: re-run the session in a user namespace of its own, where it may create network namespaces.

Like ``unshare --user --map-root-user --mount`` (which it uses): the session stays in the
host's network namespace but has no power over it, the namespaces its labs create belong to
its user namespace, and a private tmpfs on /run/netns holds their names, so every piece of
lab code runs unchanged. Interface used by ``plugin.py``:

- ``maybe_run_rootless(config) -> int | None``: when this process cannot build labs and
  ``--tcpnet-rootless`` allows it, re-run the invocation rootless and return its exit code.
- ``inside() -> bool``: True in a session started that way.
- ``privilege_hint() -> str``: what to do when labs cannot be built here (names a blocking setting).

``python -m pytest_tcpnet.rootless ARGS`` is the stage that runs inside the namespaces:
it mounts the private directories and execs ``python -m pytest ARGS``.
"""

import ctypes
import functools
import os
import shutil
import signal
import subprocess
import sys

__all__ = [
    "MODES",
    "MODE_ENV",
    "INSIDE_ENV",
    "inside",
    "userns_blocker",
    "privilege_hint",
    "maybe_run_rootless",
    "rootless_command",
]

MODES = ("auto", "on", "off")
#: Default of --tcpnet-rootless.
MODE_ENV = "TCPNET_ROOTLESS"
#: Set to "1" in the environment of a session re-run rootless (and stops it from recursing).
INSIDE_ENV = "TCPNET_IN_USERNS"
_EXIT_USAGE = 4
_EXIT_INTERRUPTED = 2
_PR_SET_PDEATHSIG = 1
_MS_NOSUID, _MS_NODEV, _MS_NOEXEC = 2, 4, 8

# (sysctl file, value that forbids unprivileged user namespaces, what it is, how to allow them)
_BLOCKING_SETTINGS = (
    (
        "/proc/sys/user/max_user_namespaces",
        "0",
        "user.max_user_namespaces=0",
        "sudo sysctl -w user.max_user_namespaces=15000",
    ),
    (
        "/proc/sys/kernel/unprivileged_userns_clone",
        "0",
        "kernel.unprivileged_userns_clone=0 (Debian/Arch patch)",
        "sudo sysctl -w kernel.unprivileged_userns_clone=1",
    ),
    (
        "/proc/sys/kernel/apparmor_restrict_unprivileged_userns",
        "1",
        "kernel.apparmor_restrict_unprivileged_userns=1 (Ubuntu's AppArmor restriction)",
        "sudo sysctl -w kernel.apparmor_restrict_unprivileged_userns=0, or an AppArmor profile that grants "
        f"'userns,' to {os.path.realpath(sys.executable)}",
    ),
)


def inside():
    """True in a session this module re-ran inside a user namespace."""
    return os.environ.get(INSIDE_ENV) == "1"


@functools.cache
def userns_blocker():
    """Why unprivileged user namespaces cannot be used here (the setting and how to allow it), or None."""
    for path, forbidding, what, how in _BLOCKING_SETTINGS:
        try:
            with open(path) as f:
                if f.read().strip() == forbidding:
                    return f"{what} forbids unprivileged user namespaces; allow them with `{how}`"
        except OSError:
            continue
    if shutil.which("unshare") is None:
        return "util-linux's unshare is not on PATH (apt-get install util-linux)"
    probe = subprocess.run(_unshare_argv() + ["true"], capture_output=True, text=True, timeout=30)
    if probe.returncode != 0:
        return f"`{' '.join(_unshare_argv())} true` failed: {probe.stderr.strip() or probe.returncode}"
    return None


def privilege_hint():
    """The advice a 'no privilege' skip gives: root, or what keeps rootless labs from working."""
    if os.environ.get(MODE_ENV) == "off":
        return "(run as root, e.g. `sudo -E pytest`, or allow rootless labs: --tcpnet-rootless=auto)"
    blocker = userns_blocker()
    if blocker:
        return f"(run as root, e.g. `sudo -E pytest`; rootless labs are impossible here: {blocker})"
    return "(run as root, e.g. `sudo -E pytest`, or rootless with --tcpnet-rootless=auto)"


def _unshare_argv():
    # No --net: the session stays in the host's network namespace, where root of a user namespace has no
    # power (CAP_NET_ADMIN there is checked against the initial user namespace), so tests that use the
    # network (localhost services, the internet) keep working; the labs' namespaces belong to this one.
    return [shutil.which("unshare") or "unshare", "--user", "--map-root-user", "--mount", "--propagation", "private"]


def rootless_command(pytest_args):
    """The command line that re-runs `python -m pytest pytest_args` inside the user namespace."""
    return _unshare_argv() + ["--", sys.executable, "-m", "pytest_tcpnet.rootless", *pytest_args]


def maybe_run_rootless(config):
    """Re-run the session rootless if it needs to and may; return its exit code, or None to go on here."""
    from .privilege import has_net_admin

    mode = config.getoption("tcpnet_rootless")
    os.environ[MODE_ENV] = mode  # xdist workers and skip messages see the same choice
    in_a_guest = config.getoption("tcpnet_vm", default=False) or config.getoption("tcpnet_deterministic", default=False)
    if mode == "off" or inside() or in_a_guest:
        # Under --tcpnet-vm the guest runs the session as root of its own kernel: nothing to do here.
        return None
    if config.getoption("help", default=False) or config.getoption("version", default=False):
        return None
    if has_net_admin():
        return None
    blocker = userns_blocker()
    if blocker:
        if mode == "on":
            _say(f"error: --tcpnet-rootless=on, but {blocker}")
            return _EXIT_USAGE
        return None  # lab tests skip, naming the blocker (requirements.check_need)
    _say("not root: running this session rootless, in a user namespace of its own (--tcpnet-rootless=off: don't)")
    return _run(rootless_command(list(config.invocation_params.args)), str(config.invocation_params.dir))


def _run(argv, cwd):
    """Run the rootless session in the foreground; SIGTERM is passed on, Ctrl-C reaches it from the terminal."""
    env = dict(os.environ, **{INSIDE_ENV: "1", "TCPNET_ROOTLESS_PARENT": str(os.getpid())})
    # Inside, the uid reads 0: keep the real user's name so pytest's tmp_path stays /tmp/pytest-of-USER
    # (a directory this user owns) instead of root's.
    env["USER"] = env["LOGNAME"] = _user_name()
    from .locks import REAL_UID_ENV, real_uid

    env[REAL_UID_ENV] = str(real_uid())
    proc = subprocess.Popen(argv, cwd=cwd, env=env)

    def forward(signum, frame):
        proc.send_signal(signum)

    # The terminal sends Ctrl-C to the whole foreground group, the child included: passing it on
    # as well would interrupt the child's teardown a second time.
    previous = {
        signal.SIGTERM: signal.signal(signal.SIGTERM, forward),
        signal.SIGINT: signal.signal(signal.SIGINT, lambda *_: None),
    }
    try:
        code = proc.wait()
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    return code if code >= 0 else _EXIT_INTERRUPTED


def _user_name():
    """The name of the user who started the session (already set by an enclosing rootless session)."""
    import pwd

    from .locks import in_user_namespace, real_uid

    if in_user_namespace() and os.environ.get("USER"):
        return os.environ["USER"]
    try:
        return pwd.getpwuid(real_uid()).pw_name
    except KeyError:
        return f"uid{real_uid()}"


def _say(message):
    sys.stderr.write(f"tcpnet-rootless: {message}\n")
    sys.stderr.flush()


def _mount_tmpfs(target, mode):
    libc = ctypes.CDLL(None, use_errno=True)
    if (
        libc.mount(b"tcpnet", target.encode(), b"tmpfs", _MS_NOSUID | _MS_NODEV | _MS_NOEXEC, f"mode={mode:o}".encode())
        != 0
    ):
        err = ctypes.get_errno()
        raise OSError(err, f"mount tmpfs on {target}: {os.strerror(err)}")


def _prepare_namespaces():
    """Inside the new namespaces: a private /run/netns, and die with the parent session."""
    from .netlink import NETNS_DIR

    netns_dir = os.path.realpath(NETNS_DIR)
    if os.path.isdir(netns_dir):
        _mount_tmpfs(netns_dir, 0o755)
    else:
        # An unprivileged user cannot create it in the host's /run: give the session a /run of its own.
        _mount_tmpfs(os.path.dirname(netns_dir), 0o755)
        os.makedirs(netns_dir, 0o755)
    # Ownership records of this session's namespaces are private to it too (the host's directory is
    # root's, and these namespaces vanish with this mount namespace anyway).
    state_dir = os.environ.get("TCPNET_STATE_DIR", "/run/pytest-tcpnet")
    if os.path.isdir(state_dir):
        _mount_tmpfs(state_dir, 0o700)
    elif not os.access(os.path.dirname(state_dir), os.W_OK):
        os.environ["TCPNET_STATE_DIR"] = os.path.join(netns_dir, ".pytest-tcpnet-state")
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)  # the outer pytest died: tear down, don't run on alone
    if os.environ.get("TCPNET_ROOTLESS_PARENT") not in (None, str(os.getppid())):
        raise SystemExit("tcpnet-rootless: the session that started this one is gone")


def main(argv=None):
    """Stage run by `unshare ... python -m pytest_tcpnet.rootless ARGS`: prepare, then exec pytest ARGS."""
    args = sys.argv[1:] if argv is None else argv
    if not inside():
        raise SystemExit("tcpnet-rootless: run by the pytest plugin inside a user namespace, not directly")
    try:
        _prepare_namespaces()
    except OSError as exc:
        raise SystemExit(f"tcpnet-rootless: cannot prepare the user namespace: {exc}") from exc
    os.execv(sys.executable, [sys.executable, "-m", "pytest", *args])


if __name__ == "__main__":
    main()
