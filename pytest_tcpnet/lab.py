"""Labs: client – router – server paths in network namespaces, and transfers across them.

Usable without pytest: ``with Lab() as lab: lab.pair(link=Link(rate="50mbit")).transfer(nbytes=...)``.
"""

import atexit
import concurrent.futures
import contextlib
import itertools
import math
import pickle
import sys
import threading
import weakref

from . import interrupts, netlink
from .errors import LabError, MissingCapability
from .measure.run import TCP_SYSCTLS, run_workload
from .model import HOST_GLOBAL_SYSCTLS, Host, Link, transfer_time
from .model.app import Flow
from .requirements import check_need
from .results import ConcurrentResult, WindowProbe
from .workload import Bulk, NamespaceProcesses, nsenter_path

__all__ = ["Lab", "Pair", "Node", "TCP_SYSCTLS", "preflight"]

_CC_SYSCTL = "net.ipv4.tcp_congestion_control"
_sequence = itertools.count()
_open_labs = weakref.WeakSet()


def preflight(link, client, server):
    """Check privilege, tools, sysctls, congestion controls and qdiscs before anything is created."""
    for name, value, kind in (("link", link, Link), ("client", client, Host), ("server", server, Host)):
        if not isinstance(value, kind):
            raise TypeError(f"{name}: expected a {kind.__name__}, got {value!r}")
    check_need("privilege")
    nsenter_path()
    for role, host in (("client", client), ("server", server)):
        for key in host.sysctls:
            if not netlink.sysctl_exists(key):
                raise ValueError(f"{role}.sysctls: unknown sysctl {key} on kernel {netlink.kernel_release()}")
        if host.cc:
            check_need(host.cc)
    if any(w.rate_bps for w in (link.toward_client, link.toward_server)):
        check_need("htb")
    if link.needs_netem:
        check_need("netem")


class Node:
    """One namespace of a pair (client, router or server): run commands there, read its sysctls."""

    def __init__(self, role, namespace, address, interface):
        self.role = role
        self.namespace = namespace
        self.address = address
        self.interface = interface
        self.processes = NamespaceProcesses(netlink.namespace_path(namespace))
        self.closed = False  # set when its pair closes: nothing more may start here

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
            raise LabError(f"{_name_of(fn)} did not return within {timeout} s in {self!r}; its thread runs on "
                           f"until it returns") from None

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
        a SpawnedCall: .pid, .result(timeout), .running(), .stop(); the pair's close stops it.
        """
        from .workload.spawn import NamespaceChild, SpawnedCall, importable_name, run_function

        self._check_open(fn)
        function = importable_name(fn)
        try:
            pickle.dumps((args, kwargs))
        except Exception as exc:
            raise TypeError(f"spawn: the arguments of {function} cannot be pickled for the child: "
                            f"{type(exc).__name__}: {exc}") from None
        child = NamespaceChild(self.processes.netns_path, run_function,
                               dict(function=function, args=args, kwargs=kwargs, sys_path=list(sys.path)),
                               name=f"{function} on {self.role}")
        self.processes.adopt(child)
        return SpawnedCall(child, function)

    def _check_open(self, fn):
        if not callable(fn):
            raise TypeError(f"fn: expected a callable, got {fn!r}")
        if self.closed:
            raise LabError(f"{self!r}: its pair is closed")

    def popen(self, argv, **kwargs):
        """Start argv inside this namespace (subprocess.Popen); stopped by pid when the pair closes."""
        return self.processes.popen(argv, **kwargs)

    def run(self, argv, *, timeout=60, check=False, **kwargs):
        """Run argv inside this namespace to completion (text output captured)."""
        return self.processes.run(argv, timeout=timeout, check=check, **kwargs)

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
        return f"<Node {self.role} {self.address} netns={self.namespace}>"


class Pair:
    """A built client – router – server path; close() (or the lab) tears it down."""

    def __init__(self, lab, index, link, client_host, server_host, names, endpoint_offloads):
        self.lab = lab
        self.index = index
        self.link = link
        self.client_host = client_host
        self.server_host = server_host
        self._endpoint_offloads = endpoint_offloads
        a = netlink.PATH_ADDRESSES
        self.client = Node("client", names["client"], a.client, a.client_if)
        self.router = Node("router", names["router"], a.router_client_side, a.router_client_if)
        self.server = Node("server", names["server"], a.server, a.server_if)
        self.offloads = {}
        self.qdisc_plan = {}
        self.socket_cc = {}
        self.closed = False
        self._created = []  # namespaces made so far, so a failed build can be undone

    @property
    def nodes(self):
        """(client, router, server)."""
        return (self.client, self.router, self.server)

    def _build(self):
        # Each namespace is created by its session's thread (unshare + bind mount, no fork), which
        # writes its sysctls on the spot and then serves every later netlink call of this pair.
        sysctls = {self.client: {k: v for k, v in self.client_host.sysctls.items() if k != _CC_SYSCTL},
                   self.router: {"net.ipv4.ip_forward": "1"},
                   self.server: {k: v for k, v in self.server_host.sysctls.items() if k != _CC_SYSCTL}}
        netlink.create_namespaces({node.namespace: sysctls[node] for node in self.nodes})
        self._created.extend(node.namespace for node in self.nodes)  # all or none: a failed create removed its own
        netlink.wire_path(self.client.namespace, self.router.namespace, self.server.namespace)
        # From this thread, one after the other: the sessions' sockets work from any thread, and
        # three threads configuring at once only queued for the GIL (and paid a hop each).
        self._configure_router()
        self._configure_endpoint(self.client, self.client_host)
        self._configure_endpoint(self.server, self.server_host)

    def _configure_router(self):
        a = netlink.PATH_ADDRESSES
        # Router hops carry real packets, not 64 KB super-packets, so qdiscs and captures count right.
        for ifname in (a.router_client_if, a.router_server_if):
            self.offloads[f"router/{ifname}"] = netlink.set_offloads(self.router.namespace, ifname, False)
        self.qdisc_plan = {
            a.router_client_if: netlink.shape_egress(self.router.namespace, a.router_client_if, self.link.toward_client),
            a.router_server_if: netlink.shape_egress(self.router.namespace, a.router_server_if, self.link.toward_server),
        }

    def _configure_endpoint(self, node, host):
        if host.cc:
            self._set_default_cc(node, host.cc)
        key = f"{node.role}/{node.interface}"
        if self._endpoint_offloads == "wire":
            # A real NIC segments TSO super-packets before the wire; a veth would hand them to the
            # router whole (a netem loss would then drop ~44 segments at once). With TSO off the
            # stack still builds large skbs (GSO, as on a real host) and segments them at the veth.
            self.offloads[key] = netlink.set_offloads(node.namespace, node.interface, False, netlink.TSO_FEATURES)
        elif self._endpoint_offloads == "kernel":
            self.offloads[key] = netlink.get_offloads(node.namespace, node.interface)
        else:
            self.offloads[key] = netlink.set_offloads(node.namespace, node.interface, self._endpoint_offloads)

    def _set_default_cc(self, node, cc):
        """Make cc the namespace's default, or, where the host forbids it, the cc of every socket we open.

        Linux lets a non-initial namespace default only to algorithms in the host's
        net.ipv4.tcp_allowed_congestion_control (EPERM otherwise); a root process may still pick
        any algorithm per socket, which is what our workloads then do (recorded as socket_cc).
        """
        try:
            netlink.write_sysctls(node.namespace, {_CC_SYSCTL: cc})
        except LabError as exc:
            if "not permitted" not in str(exc):
                raise
            self.socket_cc[node.role] = cc

    def interface_counters(self):
        """{"role/ifname": counters} for the four veth ends of the path."""
        a = netlink.PATH_ADDRESSES
        ends = ((self.client, a.client_if), (self.router, a.router_client_if), (self.router, a.router_server_if),
                (self.server, a.server_if))
        return {f"{node.role}/{ifname}": netlink.interface_counters(node.namespace, ifname) for node, ifname in ends}

    def router_qdisc_stats(self):
        """{ifname: [qdisc stats]} of the router's two shaped interfaces."""
        a = netlink.PATH_ADDRESSES
        return netlink.qdisc_stats_of(self.router.namespace, [a.router_client_if, a.router_server_if])

    def transfer(self, nbytes=None, *, duration=None, direction="download", sndbuf=None, rcvbuf=None, cc=None,
                 reader=None, writer=None, write_size=1 << 20, starve_receiver=False, capture=False,
                 sample_interval=None, timeout=None):
        """Move nbytes (or send for `duration` seconds) between the endpoints with the bulk workload; measure it.

        "download" sends server -> client, "upload" client -> server; sndbuf/rcvbuf set SO_SNDBUF
        on the sender and SO_RCVBUF on the receiver (None: kernel autotuning); cc sets
        TCP_CONGESTION on the sender's socket; reader/writer are Pace(...) or Pause(...) for the
        receiving/sending application; starve_receiver runs the reader at the lowest priority on a
        core shared with a CPU hog; write_size is the bytes per send() (C11); capture=True records the sender's side with tshark;
        sample_interval (seconds; default fit to the RTT, 0 for none) samples TCP_INFO and socket
        memory of both ends (``result.series(field, side)``).
        """
        flow = Flow(nbytes=nbytes, duration=duration, direction=direction, sndbuf=sndbuf, rcvbuf=rcvbuf, cc=cc,
                    reader=reader, writer=writer, write_size=write_size)
        results = self._run_bulk([flow], starve_receiver=starve_receiver, capture=capture,
                                 sample_interval=sample_interval, timeout=timeout)
        result = results[0]
        if nbytes is not None and result.nbytes != flow.nbytes:
            raise LabError(f"receiver got {result.nbytes} of {flow.nbytes} bytes\n{result.describe()}")
        return result

    def concurrent(self, flows, *, capture=False, sample_interval=None, timeout=None):
        """Run several Flow(...)s on this pair at once (each with its own size or duration, buffers, cc, start).

        Returns a ConcurrentResult: `.flows` (a TransferResult each), `.total_bps`, `.jain_index`.
        """
        flows = list(flows)
        if not flows or not all(isinstance(f, Flow) for f in flows):
            raise TypeError(f"flows: expected a non-empty list of Flow(...), got {flows!r}")
        results = self._run_bulk(flows, starve_receiver=False, capture=capture, sample_interval=sample_interval,
                                 timeout=timeout)
        return ConcurrentResult(flows=results)

    def iperf3(self, *, duration, direction="download", cc=None, window=None, parallel=1, capture=False,
               sample_interval=None, timeout=None):
        """One iperf3 TCP test (libiperf through the `iperf3` bindings; `iperf3 -J` as the fallback).

        The result's throughput_bps is iperf3's own received average; `details["intervals"]` has
        the sender's per-interval rate, retransmits, cwnd and rtt; series() come from sampling.
        """
        flow = Flow(duration=duration, direction=direction, cc=cc, rcvbuf=window)
        if flow.duration != int(flow.duration):
            raise ValueError(f"duration: iperf3 runs whole seconds; got {duration!r}")
        if isinstance(parallel, bool) or not isinstance(parallel, int) or not 1 <= parallel <= 128:
            raise ValueError(f"parallel: must be an int in 1..128 (iperf3 -P), got {parallel!r}")
        check_need("iperf3")
        from .workload.iperf3 import Iperf3

        workload = Iperf3(duration=flow.duration, direction=direction, cc=cc, window=flow.rcvbuf, parallel=parallel)
        return self._measure(workload, [flow], capture=capture, sample_interval=sample_interval,
                             timeout=timeout or _default_timeout(flow, self.link))[0]

    def http_download(self, nbytes, *, limit_rate=None, capture=False, sample_interval=None, timeout=None):
        """curl in the client downloads nbytes from an HTTP server in the server namespace.

        limit_rate is curl's --limit-rate as curl spells it ("200k" = 200 KiB/s). The result's
        throughput_bps is curl's own average; rate_series() comes from the client socket's
        sampled bytes_received.
        """
        flow = Flow(nbytes=nbytes)
        check_need("curl")
        from .workload.http import HttpDownload

        workload = HttpDownload(flow.nbytes, limit_rate=limit_rate)
        timeout = timeout or _default_timeout(flow, self.link)
        if workload.limit_rate_bytes:
            timeout += 3 * flow.nbytes / workload.limit_rate_bytes
        return self._measure(workload, [flow], capture=capture, sample_interval=sample_interval, timeout=timeout)[0]

    def _run_bulk(self, flows, *, starve_receiver, capture, sample_interval, timeout):
        """Checks every option before anything starts, then runs the Bulk workload."""
        for flow in flows:
            if flow.cc is not None:
                check_need(flow.cc)
        if not isinstance(starve_receiver, bool):
            raise TypeError(f"starve_receiver: expected True or False, got {starve_receiver!r}")
        timeout = timeout or max(_default_timeout(flow, self.link) for flow in flows)
        workload = Bulk(flows, starve_receiver=starve_receiver, socket_cc=self.socket_cc)
        return self._measure(workload, flows, capture=capture, sample_interval=sample_interval, timeout=timeout,
                             conditions={"starved_receiver": starve_receiver})

    def _measure(self, workload, flows, *, capture, sample_interval, timeout, conditions=None):
        """Validate the measurement options, run the workload, keep its results in the lab."""
        for flow in flows:
            if flow.cc is not None:
                check_need(flow.cc)
        if capture is True or capture in ("client", "router", "server"):
            check_need("tshark")
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0:
            raise ValueError(f"timeout: must be a number of seconds > 0, got {timeout!r}")
        if self.closed:
            raise LabError("this pair is closed")
        return run_workload(self, workload, timeout=timeout, sample_interval=sample_interval, capture=capture,
                            artifact_dir=self.lab.artifact_dir, conditions=conditions)

    def observe(self, *, capture=False, sample_interval=None, app_window=None):
        """Measure whatever runs on this pair inside the block: your own programs, started with popen/run/spawn/call.

        ``with pair.observe() as seen: ...`` holds a measurement slot, samples TCP_INFO and socket
        memory of every TCP socket in the client and server namespaces (both ends, matched by
        4-tuple), reads the path's counters before and after and, with capture=True, captures
        at both ends. Afterwards ``seen.flows`` holds one TransferResult per connection between
        the two ends, largest first, registered with the lab (session table, results files,
        failure artifacts) and accepted by every assertion; each one's capture is the one taken
        at the end that sent its data. docs/your-application.md says what sampling can miss.
        app_window: your protocol's own bound, if it has one (bytes, or "16kb"): what it keeps
        outstanding per application round trip (a stop-and-wait protocol's chunk per ACK); the
        model then predicts that bound where it binds, instead of the network's alone.
        """
        from .measure.observe import Observation
        from .model.units import parse_size

        if capture not in (False, True):
            raise ValueError(f"capture: must be True or False (both ends are captured; each connection gets the "
                             f"capture of the end that sent its data), got {capture!r}")
        if app_window is not None:
            app_window = parse_size(app_window, "app_window")
            if not (math.isfinite(app_window) and app_window >= 1):
                raise ValueError(f"app_window: must be at least 1 byte (or None: no bound of its own), got {app_window!r}")
            app_window = int(app_window)
        if capture:
            check_need("tshark")
        return Observation(self, capture=capture, sample_interval=sample_interval, app_window_bytes=app_window)

    def measure_advertised_window(self, *, rcvbuf=None, nbytes=None, direction="download"):
        """The largest window the receiver advertised during a transfer, as the sender saw it (TCP_INFO snd_wnd).

        rcvbuf sets SO_RCVBUF on the receiver (None: autotuning from tcp_rmem); the receiver
        reads as fast as it can, so the window is limited by the buffer alone (C8).
        """
        if nbytes is None:
            nbytes = max(2_000_000, 20 * (2 * rcvbuf if isinstance(rcvbuf, int) else 0))
        result = self.transfer(nbytes, direction=direction, rcvbuf=rcvbuf, sample_interval=0.001)
        windows = [w for w in result.tcp_info_series("snd_wnd") if w is not None]
        windows.append(result.sender_tcp_info.get("snd_wnd"))
        if not any(windows):
            raise MissingCapability("tcpi_snd_wnd", f"kernel {result.kernel} does not report snd_wnd in TCP_INFO")
        receiver = self.client if direction == "download" else self.server
        probe = WindowProbe(window_bytes=max(w for w in windows if w is not None), rcvbuf_requested=result.rcvbuf_requested,
                            rcvbuf_effective=result.effective_rcvbuf, kernel=result.kernel,
                            sysctls=result.sysctls[receiver.role], transfer=result)
        self.lab.results.append(probe)  # report: the probe stands for its transfer in the summary
        return probe

    def close(self):
        """Stop our processes, then remove the namespaces (which removes the veths and qdiscs)."""
        if self.closed:
            return
        self.closed = True
        errors = []
        for node in self.nodes:
            node.closed = True
            node.processes.stop_all()
        try:
            netlink.remove_namespaces(self._created[::-1])
        except OSError as exc:
            errors.append(str(exc))
        if errors:
            raise LabError("teardown left namespaces behind: " + "; ".join(errors))

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.close()

    def __repr__(self):
        return f"<Pair #{self.index} {self.link!r} client={self.client_host.describe()} " \
               f"server={self.server_host.describe()}>"


class Lab:
    """A set of pairs owned by this process; closing it tears every pair down, in reverse order.

    endpoint_offloads: "wire" (default) makes the endpoints' veths behave like a real NIC on a
    wire: TSO off so only MTU-sized packets reach the router, GSO/GRO as the kernel set them;
    "kernel" keeps every veth offload as created; True/False forces all of them on or off.
    Whatever is chosen is recorded in each result's ``offloads``.

    artifact_dir: where results write their pcaps and plots (the ``tcpnet`` fixture gives each
    test its own, kept per ``--tcpnet-keep``); ``results`` lists every result the lab produced.
    """

    def __init__(self, *, sweep=True, endpoint_offloads="wire", artifact_dir=None):
        #: Every TransferResult / WindowProbe this lab's pairs produced, in order (the plugin reports them).
        self.results = []
        #: Where results write pcaps and plots (None: nowhere until a directory is given).
        self.artifact_dir = None if artifact_dir is None else str(artifact_dir)
        if endpoint_offloads not in ("wire", "kernel", True, False):
            raise ValueError(f"endpoint_offloads: must be 'wire', 'kernel', True or False, got {endpoint_offloads!r}")
        self._pairs = []
        self._lock = threading.Lock()
        self._endpoint_offloads = endpoint_offloads
        self.closed = False
        interrupts.install()  # a Ctrl-C the interpreter drops is raised again by the lab's next wait
        if sweep and netlink.has_net_admin():
            netlink.sweep_stale_namespaces()
        _open_labs.add(self)

    def pair(self, link=None, client=None, server=None):
        """Build a client – router – server path: validated first, nothing is left behind on error."""
        link = Link() if link is None else link
        client = Host() if client is None else client
        server = Host() if server is None else server
        if self.closed:
            raise LabError("this lab is closed")
        preflight(link, client, server)
        index = next(_sequence)
        tag = netlink.owner_tag()
        names = {role: f"{netlink.PREFIX}{tag}-{index}{role[0]}" for role in ("client", "router", "server")}
        pair = Pair(self, index, link, client, server, names, self._endpoint_offloads)
        try:
            pair._build()
        except BaseException:
            with contextlib.suppress(Exception):
                pair.close()
            raise
        with self._lock:
            self._pairs.append(pair)
        return pair

    @property
    def pairs(self):
        """The pairs built so far (closed ones included)."""
        return list(self._pairs)

    def close(self):
        """Tear down every pair, newest first; report every failure, not just the first."""
        self.closed = True
        errors = []
        with self._lock:
            pairs, self._pairs = self._pairs[::-1], []
        for pair in pairs:
            try:
                pair.close()
            except Exception as exc:  # keep tearing down the others
                errors.append(str(exc))
        if errors:
            raise LabError("; ".join(errors))

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.close()


def _check_timeout(timeout):
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not (timeout > 0 and math.isfinite(timeout)):
        raise ValueError(f"timeout: must be a number of seconds > 0, or None, got {timeout!r}")
    return timeout


def _name_of(fn):
    return getattr(fn, "__qualname__", None) or repr(fn)


@atexit.register
def _close_forgotten_labs():
    """Last line of defence for scripts that never closed their lab (pytest closes it in fixtures)."""
    for lab in list(_open_labs):
        with contextlib.suppress(Exception):
            lab.close()


_LONGEST_DEADLINE = 24 * 3600.0  # poll() takes at most ~24 days; no test should wait a day anyway


def _default_timeout(flow, link):
    """Generous deadline: 10x the time at 1 Mbit/s (or a slower shaped rate) plus start-up and pauses; at most a day.

    Not the link's rate: a window-limited flow can be far slower than its link.
    """
    return min(_LONGEST_DEADLINE, _unbounded_timeout(flow, link))


def _unbounded_timeout(flow, link):
    rates = [w.rate_bps for w in (link.toward_client, link.toward_server) if w.rate_bps]
    slowest = min(rates + [1e6]) if rates else 1e6
    pauses = sum(p.seconds for p in (flow.reader, flow.writer) if hasattr(p, "seconds"))
    if flow.duration is not None:
        return 60.0 + flow.start + flow.duration + pauses
    paced = [p.rate_bps for p in (flow.reader, flow.writer) if hasattr(p, "rate_bps")]
    pace_time = 2 * transfer_time(flow.nbytes, min(paced)) if paced else 0
    return max(60.0, 10 * transfer_time(flow.nbytes, slowest) + 30 * link.rtt_s) + flow.start + pauses + pace_time
