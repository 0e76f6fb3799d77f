"""A node of a world: one network namespace, with its processes and the Python calls run inside it."""

import concurrent.futures
import pickle
import sys
import time

from .. import interrupts, netlink
from ..errors import LabError
from ..measure.run import TCP_SYSCTLS
from ..model import HOST_GLOBAL_SYSCTLS
from ..model.validation import check_flag, check_integer, check_number
from ..workload.process import NamespaceProcesses

__all__ = ["Node"]


class Node:
    """One namespace of a world (a client, server or router): run commands there, read its sysctls.

    role: "client", "server" or "router" (what workloads and results call it); name: its name in
    its world ("client", "c2", "left", ...). address/interface: the primary address (IPv6 in an
    IPv6 world) and interface of its first link (a host has one); `interfaces` lists every
    (ifname, primary address), `addresses` every address.
    """

    def __init__(self, role, name, namespace):
        self.role = role
        self.name = name
        self.namespace = namespace
        self.address = None
        self.interface = None
        self.interfaces = []
        self.addresses = []  # every address of every interface (IPv4 and IPv6 in a dual world)
        self.processes = NamespaceProcesses(netlink.namespace_path(namespace))
        self.closed = False  # set when its world closes: nothing more may start here

    def call(self, fn, /, *args, timeout=None, **kwargs):
        """Run fn(*args, **kwargs) in a fresh thread inside this namespace; return its result.

        Its exception is re-raised with a note naming this node; LabError if it does not return
        within `timeout` seconds (the thread runs on: a thread cannot be killed). The thread
        ends with fn and serves nothing else, so no thread that entered a lab runs host work.
        """
        timeout = _check_timeout(timeout)
        future = self.submit(fn, *args, **kwargs)
        try:
            return interrupts.result(future, timeout)
        except concurrent.futures.TimeoutError:
            raise LabError(
                f"{_name_of(fn)} did not return within {timeout} s in {self!r}; its thread runs on until it returns"
            ) from None

    def submit(self, fn, /, *args, **kwargs):
        """Start fn(*args, **kwargs) in a fresh thread inside this namespace; a concurrent.futures.Future of it."""
        self._check_open(fn)
        where = repr(self)

        def run():
            try:
                return fn(*args, **kwargs)
            except BaseException as exc:
                exc.add_note(f"raised by {_name_of(fn)} in {where}")
                raise

        return netlink.submit_in_namespace(self.namespace, run)

    def spawn(self, fn, /, *args, **kwargs):
        """Run fn(*args, **kwargs) in a process forked from the plugin's preloaded zygote inside this namespace.

        No GIL shared with this process (or the socket sampler), and milliseconds to start
        where a fresh interpreter takes seconds (the emulated VM). fn must be a module-level
        function the child can import by name; arguments and result travel by pickle. Returns
        a SpawnedCall: .pid, .result(timeout), .running(), .stop(); its world's close stops it.
        """
        from ..workload.spawn import NamespaceChild, SpawnedCall, importable_name, run_function

        self._check_open(fn)
        function = importable_name(fn)
        try:
            pickle.dumps((args, kwargs))
        except Exception as exc:
            raise TypeError(
                f"spawn: the arguments of {function} cannot be pickled for the child: {type(exc).__name__}: {exc}"
            ) from None
        child = NamespaceChild(
            self.processes.netns_path,
            run_function,
            dict(function=function, args=args, kwargs=kwargs, sys_path=list(sys.path)),
            name=f"{function} on {self.role}",
        )
        self.processes.adopt(child)
        return SpawnedCall(child, function)

    def _check_open(self, fn):
        if not callable(fn):
            raise TypeError(f"fn: expected a callable, got {fn!r}")
        if self.closed:
            raise LabError(f"{self!r}: its world is closed")

    def popen(self, argv, **kwargs):
        """Start argv inside this namespace (subprocess.Popen); stopped by pid when its world closes."""
        return self.processes.popen(argv, **kwargs)

    def stop(self, proc, grace=1.0):
        """Stop a process popen() started here: SIGTERM to its process group, SIGKILL after `grace` seconds."""
        self.processes.stop(proc, grace)

    def run(self, argv, *, timeout=60, check=False, **kwargs):
        """Run argv inside this namespace to completion (text output captured)."""
        return self.processes.run(argv, timeout=timeout, check=check, **kwargs)

    def wait_listening(self, port, *, timeout=10.0, udp=False):
        """Block until something in this namespace listens on TCP `port` (udp=True: has a UDP socket bound to it),
        as a server started with popen() does once it is ready; a LabError naming the node and port after timeout.

        Reads the kernel's socket table (sock_diag), so nothing connects to the program to find out."""
        check_integer("port", port, 1, 65535, must="a port number in 1..65535")
        check_number("timeout", timeout, 0, 3600, low_open=True, must="a number of seconds in (0, 3600]")
        check_flag("udp", udp)
        self._check_open(self.wait_listening)
        deadline = time.monotonic() + timeout
        delay = 0.002
        while port not in netlink.listening_ports(self.namespace, udp=udp):
            if time.monotonic() >= deadline:
                raise LabError(
                    f"{self!r}: nothing {'bound UDP' if udp else 'listened on TCP'} port {port} within {timeout:g} s"
                    + (f"; exited here meanwhile: {', '.join(exited)}" if (exited := self.processes.exited()) else "")
                )
            time.sleep(delay)
            delay = min(0.05, delay * 2)  # a server that is quick to start is seen within milliseconds

    def sysctls(self, keys=TCP_SYSCTLS):
        """Current values of sysctls as this namespace sees them (missing ones omitted).

        Host-global ones (net.core.rmem_max, ...) that a namespace does not show (6.1 hides them)
        are the host's values, which the namespace's sockets obey.
        """
        values = {k: v for k, v in netlink.read_sysctls(self.namespace, keys).items() if v is not None}
        hidden = [k for k in keys if k not in values and k in HOST_GLOBAL_SYSCTLS]
        if hidden:
            values.update({k: v for k, v in netlink.read_host_sysctls(hidden).items() if v is not None})
        return values

    def __repr__(self):
        name = "" if self.name == self.role else f" {self.name}"
        return f"<Node {self.role}{name} {self.address} netns={self.namespace}>"


def _check_timeout(timeout):
    if timeout is None:
        return None
    return check_number("timeout", timeout, 0, low_open=True, must="a number of seconds > 0, or None")


def _name_of(fn):
    return getattr(fn, "__qualname__", None) or repr(fn)
