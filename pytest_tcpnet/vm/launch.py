"""Running one ``vng`` process: its own process group, live output, start sentinel, deadline.

The process tree is watchdog -> ``vng`` -> ``sh`` -> ``virtme-run`` -> ``qemu``, all in the
process group we create, so signalling that group stops exactly the processes we started.
"""

from __future__ import annotations

import collections
import contextlib
import os
import re
import selectors
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field

_WATCHDOG = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_watchdog.py")
# Grace between SIGTERM (lets vng clean its temp files, qemu exit) and SIGKILL.
_TERM_GRACE = 5.0
# The kernel's last words on a normal shutdown (an EMERG-level line, so printk levels cannot
# hide it): noise after a session's summary line.
# (User-Mode Linux prints it without a timestamp and says "System halted".)
_POWER_DOWN = re.compile(rb"(?m)^(\[\s*\d+\.\d+\] )?reboot: (Power down|System halted)\r?(\n|$)")
# How long pipes may stay open after vng exited before we assume a stray child holds them.
_EXIT_GRACE = 3.0


@dataclass
class LaunchResult:
    """What happened to one VM run."""

    started: bool = False  # the guest printed the sentinel
    start_seconds: float = 0.0  # from launch to sentinel
    returncode: int | None = None  # vng's exit status (None if we had to kill it)
    timed_out: bool = False  # boot deadline (or post-start limit) passed, VM killed
    interrupted: int | None = None  # signal number that made us stop the VM
    tail: list = field(default_factory=list)  # last lines of output not shown to the user
    total_seconds: float = 0.0
    nice: int | None = None  # the emulator's nice value once the guest started (None: not read)
    autogroup_nice: int | None = None  # its session's autogroup nice (None: no autogroups)


class _Terminated(Exception):
    """Raised from our SIGTERM/SIGHUP handler so the VM is stopped before we go."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def _raise_terminated(signum, _frame):
    raise _Terminated(signum)


def _write(stream, data: bytes) -> None:
    """Write raw guest bytes to a host stream right away (live output)."""
    buf = getattr(stream, "buffer", None)
    try:
        if buf is not None:
            stream.flush()
            buf.write(data)
            buf.flush()
        else:
            stream.write(data.decode("utf-8", "replace"))
            stream.flush()
    except (OSError, ValueError):
        pass  # a closed terminal must not turn into a VM left running


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def stop_group(proc: subprocess.Popen, grace: float = _TERM_GRACE) -> None:
    """Stop the process group led by ``proc``: SIGTERM, then SIGKILL after ``grace`` seconds."""
    pgid = proc.pid
    main = threading.current_thread() is threading.main_thread()
    old_int = signal.signal(signal.SIGINT, signal.SIG_IGN) if main else None
    try:
        try:
            os.killpg(pgid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        deadline = time.monotonic() + grace
        # The leader (vng) may exit before qemu does: wait for the whole group.
        while time.monotonic() < deadline:
            proc.poll()
            if not _group_alive(pgid):
                break
            time.sleep(0.1)
        else:
            try:
                os.killpg(pgid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            pass
    finally:
        if main:
            signal.signal(signal.SIGINT, old_int)


class _Tail:
    """Keep the last lines of a byte stream, for error messages."""

    def __init__(self, lines: int) -> None:
        self.lines: collections.deque = collections.deque(maxlen=lines)
        self.partial = b""

    def feed(self, data: bytes) -> None:
        data = self.partial + data
        *complete, self.partial = data.split(b"\n")
        for line in complete:
            self.lines.append(line.decode("utf-8", "replace").replace("\r", "").rstrip())

    def get(self) -> list:
        rest = [self.partial.decode("utf-8", "replace").rstrip()] if self.partial.strip() else []
        return [ln for ln in self.lines if ln] + rest


class _ConsoleFilter:
    """Drop the kernel's "Power down" line from the guest's stderr, passing the rest on at once.

    The serial console delivers it a few bytes at a time, so a line that may be a kernel
    line (it starts with "[") is held until complete; anything else is passed on as it comes.
    """

    def __init__(self) -> None:
        self.held = b""

    def feed(self, data: bytes) -> bytes:
        data = self.held + data
        cut = data.rfind(b"\n") + 1
        done, rest = data[:cut], data[cut:]
        self.held = rest if rest.startswith(b"[") or rest[:7] == b"reboot:"[: len(rest)] else b""
        if not self.held:
            done += rest
        return _POWER_DOWN.sub(b"", done)

    def flush(self) -> bytes:
        held, self.held = self.held, b""
        return _POWER_DOWN.sub(b"", held)


def launch(
    cmd: list,
    *,
    cwd: str,
    sentinel: bytes,
    boot_timeout: float,
    echo: bool = True,
    echo_boot: bool = False,
    after_start_timeout: float | None = None,
    on_start=None,
    tail_lines: int = 40,
    stdout=None,
    stderr=None,
    cleanup: str | None = None,
    nice: int | None = None,
    env: dict | None = None,
    abort: threading.Event | None = None,
    on_spawn=None,
) -> LaunchResult:
    """Run ``cmd`` (a vng command), stream its output, enforce the boot deadline, never leak it.

    Output before ``sentinel`` (a line the guest prints first) is the boot log: it is kept for
    error messages and shown only if ``echo_boot``. After it, guest stdout/stderr go live to
    ``stdout``/``stderr`` if ``echo``. ``on_start(seconds)`` is called when the sentinel arrives.
    ``cleanup`` is a directory the watchdog removes if this process dies without stopping the VM.
    ``nice``: the emulator's nice value, where this process may set it (LaunchResult.nice says what it got).
    ``env``: variables to add to the command's environment (the watchdog's settings among them).
    ``abort``: an event that stops the VM as Ctrl-C would (a launch in a thread other than the main one, which
    signals never reach). ``on_spawn(pid)`` is called with the watchdog's pid, the root of the VM's processes.
    """
    stdout = stdout or sys.stdout
    stderr = stderr or sys.stderr
    result = LaunchResult()
    tail = _Tail(tail_lines)
    t0 = time.monotonic()
    # The watchdog holds the read end of `lifeline`; we hold the write end until we return,
    # so a launcher killed with SIGKILL still takes its VM down with it.
    lifeline_r, lifeline_w = os.pipe()
    try:
        proc = subprocess.Popen(
            [sys.executable, "-I", _WATCHDOG, str(lifeline_r), cleanup or "-", *cmd],
            cwd=cwd,
            stdin=subprocess.DEVNULL,  # qemu would otherwise put a terminal in raw mode
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            pass_fds=(lifeline_r,),
            start_new_session=True,  # our own group: Ctrl-C reaches us, we stop the VM
            env=None
            if nice is None and not env
            else dict(os.environ, **(env or {}), **({} if nice is None else {"TCPNET_VM_NICE": str(nice)})),
        )
    except BaseException:
        os.close(lifeline_w)
        raise
    finally:
        os.close(lifeline_r)
    assert proc.stdout is not None and proc.stderr is not None  # both are pipes
    pipes = (proc.stdout, proc.stderr)
    main = threading.current_thread() is threading.main_thread()
    old_handlers = {}
    sel = selectors.DefaultSelector()
    pending = b""  # stdout before the sentinel
    err_filter = _ConsoleFilter()
    exited_at = None
    try:
        # Inside the try: a Ctrl-C that lands here must stop the VM like any other.
        if on_spawn is not None:
            on_spawn(proc.pid)
        if main:
            for sig in (signal.SIGTERM, signal.SIGHUP):
                old_handlers[sig] = signal.signal(sig, _raise_terminated)
        for f in pipes:
            os.set_blocking(f.fileno(), False)
            sel.register(f, selectors.EVENT_READ)
        while sel.get_map():
            if abort is not None and abort.is_set():
                raise KeyboardInterrupt
            now = time.monotonic()
            if not result.started and now - t0 > boot_timeout:
                result.timed_out = True
                break
            if (
                result.started
                and after_start_timeout is not None
                and (now - t0 - result.start_seconds > after_start_timeout)
            ):
                result.timed_out = True
                break
            if proc.poll() is not None:
                exited_at = exited_at or now
                if now - exited_at > _EXIT_GRACE:
                    break  # something else holds the pipes; stop_group below
            for key, _ in sel.select(timeout=0.25):
                try:
                    data = os.read(key.fd, 65536)
                except BlockingIOError:
                    continue
                if not data:
                    sel.unregister(key.fileobj)
                    continue
                is_out = key.fileobj is proc.stdout
                if result.started:
                    if not is_out:
                        tail.feed(data)  # guest errors (e.g. a panic) for the post-mortem
                        data = err_filter.feed(data)
                    if echo and data:
                        _write(stdout if is_out else stderr, data)
                    continue
                if echo_boot:
                    _write(stderr, data)
                if not is_out:
                    tail.feed(data)
                    continue
                pending += data
                idx = pending.find(sentinel)
                if idx < 0:
                    continue
                tail.feed(pending[:idx])
                rest = pending[idx + len(sentinel) :]
                rest = rest[1:] if rest.startswith(b"\n") else rest
                pending = b""
                result.started = True
                result.start_seconds = time.monotonic() - t0
                with contextlib.suppress(OSError):
                    result.nice = os.getpriority(os.PRIO_PROCESS, proc.pid)  # the watchdog's, which its child inherited
                with contextlib.suppress(OSError, ValueError, IndexError):
                    with open(
                        f"/proc/{proc.pid}/autogroup", encoding="ascii"
                    ) as autogroup:  # "/autogroup-123 nice -10"
                        result.autogroup_nice = int(autogroup.read().split()[-1])
                if on_start is not None:
                    on_start(result.start_seconds)
                if echo and rest:
                    _write(stdout, rest)
        if not result.timed_out and not sel.get_map():
            # Both pipes closed: vng is exiting on its own; give it a moment.
            try:
                proc.wait(timeout=_EXIT_GRACE)
            except subprocess.TimeoutExpired:
                pass
        if proc.poll() is None or sel.get_map():
            stop_group(proc)
    except KeyboardInterrupt:
        result.interrupted = signal.SIGINT
        stop_group(proc)
    except _Terminated as exc:
        result.interrupted = exc.signum
        stop_group(proc)
    except BaseException:
        stop_group(proc)
        raise
    finally:
        for sig, handler in old_handlers.items():
            signal.signal(sig, handler)
        sel.close()
        for f in pipes:
            f.close()
        os.close(lifeline_w)
    if pending:
        tail.feed(pending)
    rest = err_filter.flush()
    if echo and rest and result.started:
        _write(stderr, rest)
    result.returncode = proc.returncode if not (result.timed_out or result.interrupted) else None
    result.tail = tail.get()
    result.total_seconds = time.monotonic() - t0
    return result
