"""Run a command and kill its whole process group when the launching process dies.

Usage: python _watchdog.py LIFELINE_FD CLEANUP_DIR|- COMMAND [ARGS...]

With TCPNET_VM_NICE set, the command starts at that nice value (qemu's threads inherit it),
where this process may set it (raising priority needs root); otherwise at the launcher's.

The launcher keeps the write end of a pipe whose read end is LIFELINE_FD. If the launcher
dies without stopping the VM (SIGKILL, a crash), the read end sees EOF and this process
stops its own process group (vng, virtme-run, qemu): an orphaned qemu would otherwise
spin forever on its closed output pipe, and removes CLEANUP_DIR (the launcher's temporary
directory, which it had no chance to remove). Exits with the command's status. Stdlib only.
"""

import os
import shutil
import signal
import subprocess
import sys
import threading
import time

_orphaned = threading.Event()


def _lifeline(fd: int, cleanup: str) -> None:
    try:
        while os.read(fd, 4096):
            pass
    except OSError:
        pass
    _orphaned.set()
    # The launcher is gone: stop vng and qemu, politely first so vng removes its temp files.
    os.killpg(0, signal.SIGTERM)
    time.sleep(3)
    if cleanup != "-":
        shutil.rmtree(cleanup, ignore_errors=True)
    os.killpg(0, signal.SIGKILL)  # includes this process


def main() -> int:
    fd, cleanup = int(sys.argv[1]), sys.argv[2]
    # Outlive the launcher's SIGTERM to the group so we can report the command's status.
    # A Python handler (unlike SIG_IGN) is reset by exec, so the command still gets it.
    signal.signal(signal.SIGTERM, lambda *_: None)
    nice = os.environ.pop("TCPNET_VM_NICE", "")
    if nice:
        try:
            os.setpriority(os.PRIO_PROCESS, 0, int(nice))  # this thread; the command forked from it inherits it
        except (OSError, ValueError):
            pass  # not permitted (no root): the launcher reports the priority the emulator got
        # With autogroups (the default on desktop and most server kernels) each session shares the CPU
        # with every other session equally, whatever its threads' nice: this new session (the launcher
        # made it for us) must carry the priority too, or a CPU hog in another session still takes half.
        try:
            with open("/proc/self/autogroup", "w") as f:
                f.write(nice)
        except (OSError, ValueError):
            pass  # no autogroups here, or not permitted
    proc = subprocess.Popen(sys.argv[3:])
    lifeline = threading.Thread(target=_lifeline, args=(fd, cleanup), daemon=True)
    lifeline.start()
    code = proc.wait()
    if _orphaned.is_set():
        lifeline.join()  # finish the SIGKILL sweep for qemu, which may outlive vng
    return code


if __name__ == "__main__":
    sys.exit(main())
