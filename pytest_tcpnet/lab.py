"""Labs: client – router – server paths in network namespaces, and transfers across them.

Usable without pytest: ``with Lab() as lab: lab.pair(link=Link(rate="50mbit")).transfer(nbytes=...)``.
"""

import atexit
import contextlib
import fcntl
import itertools
import json
import os
import subprocess
import sys
import threading
import time
import weakref

from . import netlink
from .errors import LabError, MissingCapability
from .model import Host, Link, check_congestion_control, parse_size, transfer_time
from .requirements import check_need
from .results import TransferResult, WindowProbe
from .workload import BULK_SCRIPT, NamespaceProcesses, nsenter_path

__all__ = ["Lab", "Pair", "Node", "TCP_SYSCTLS", "preflight"]

#: Sysctls recorded with every result: the ones that change what TCP does on a path.
TCP_SYSCTLS = (
    "net.ipv4.tcp_rmem", "net.ipv4.tcp_wmem", "net.ipv4.tcp_congestion_control", "net.ipv4.tcp_window_scaling",
    "net.ipv4.tcp_adv_win_scale", "net.ipv4.tcp_moderate_rcvbuf", "net.ipv4.tcp_sack", "net.ipv4.tcp_timestamps",
    "net.ipv4.tcp_ecn", "net.ipv4.tcp_notsent_lowat", "net.ipv4.tcp_autocorking", "net.ipv4.tcp_slow_start_after_idle",
    "net.ipv4.tcp_no_metrics_save", "net.ipv4.tcp_limit_output_bytes", "net.ipv4.tcp_shrink_window",
    "net.core.rmem_max", "net.core.wmem_max", "net.core.rmem_default", "net.core.wmem_default",
)

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

    def popen(self, argv, **kwargs):
        """Start argv inside this namespace (subprocess.Popen); stopped by pid when the pair closes."""
        return self.processes.popen(argv, **kwargs)

    def run(self, argv, *, timeout=60, check=False, **kwargs):
        """Run argv inside this namespace to completion (text output captured)."""
        return self.processes.run(argv, timeout=timeout, check=check, **kwargs)

    def sysctls(self, keys=TCP_SYSCTLS):
        """Current values of sysctls as this namespace sees them (missing ones omitted)."""
        return {k: v for k, v in netlink.read_sysctls(self.namespace, keys).items() if v is not None}

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
        a = netlink.PATH_ADDRESSES
        # Each namespace is created by its session's thread (unshare + bind mount, no fork), which
        # writes its sysctls on the spot and then serves every later netlink call of this pair.
        sysctls = {self.client: {k: v for k, v in self.client_host.sysctls.items() if k != _CC_SYSCTL},
                   self.router: {"net.ipv4.ip_forward": "1"},
                   self.server: {k: v for k, v in self.server_host.sysctls.items() if k != _CC_SYSCTL}}
        netlink.create_namespaces({node.namespace: sysctls[node] for node in self.nodes})
        self._created.extend(node.namespace for node in self.nodes)  # all or none: a failed create removed its own
        netlink.wire_path(self.client.namespace, self.router.namespace, self.server.namespace)
        # The three namespaces are configured concurrently, each by its own session thread.
        netlink.run_in_namespaces([(self.router.namespace, self._configure_router),
                                   (self.client.namespace, self._configure_endpoint, self.client, self.client_host),
                                   (self.server.namespace, self._configure_endpoint, self.server, self.server_host)])

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
        return {ifname: netlink.qdisc_stats(self.router.namespace, ifname)
                for ifname in (a.router_client_if, a.router_server_if)}

    def transfer(self, nbytes, *, direction="download", sndbuf=None, rcvbuf=None, cc=None, timeout=None,
                 sample_interval=None):
        """Move nbytes between the endpoints with the bulk workload and measure the goodput.

        "download" sends server -> client, "upload" client -> server; sndbuf/rcvbuf set
        SO_SNDBUF on the sender and SO_RCVBUF on the receiver (None: kernel autotuning);
        cc sets TCP_CONGESTION on the sender's socket; sample_interval (seconds) records the
        sender's TCP_INFO over time (``result.tcp_info_series(field)``).
        """
        nbytes = _positive_int("nbytes", nbytes)
        if direction not in ("download", "upload"):
            raise ValueError(f"direction: must be 'download' (server -> client) or 'upload', got {direction!r}")
        sndbuf = None if sndbuf is None else _buffer_bytes("sndbuf", sndbuf)
        rcvbuf = None if rcvbuf is None else _buffer_bytes("rcvbuf", rcvbuf)
        if cc is not None:
            check_congestion_control("cc", cc)
            check_need(cc)
        if self.closed:
            raise LabError("this pair is closed")
        if timeout is None:
            timeout = _default_timeout(nbytes, self.link)
        sender = self.server if direction == "download" else self.client
        cc = cc or self.socket_cc.get(sender.role)
        common = [f"--nbytes={nbytes}", f"--timeout={timeout}"]
        sender_opts = common + ([f"--sndbuf={sndbuf}"] if sndbuf else []) + ([f"--cc={cc}"] if cc else [])
        if sample_interval is not None:
            if not isinstance(sample_interval, (int, float)) or not 0 < sample_interval <= 10:
                raise ValueError(f"sample_interval: must be in (0, 10] seconds, got {sample_interval!r}")
            sender_opts.append(f"--sample-interval={sample_interval}")
        receiver_opts = common + ([f"--rcvbuf={rcvbuf}"] if rcvbuf else [])
        stats_before, counters_before = self.router_qdisc_stats(), self.interface_counters()
        sender_record, receiver_record = self._run_flow(direction, sender_opts, receiver_opts, timeout)
        if receiver_record["nbytes"] != nbytes:
            raise LabError(f"receiver got {receiver_record['nbytes']} of {nbytes} bytes")
        stats_after, counters_after = self.router_qdisc_stats(), self.interface_counters()
        return TransferResult(
            nbytes=nbytes,
            duration_s=receiver_record["last_byte_at"] - receiver_record["connected_at"],
            direction=direction,
            kernel=netlink.kernel_release(),
            link=self.link,
            client=self.client_host,
            server=self.server_host,
            sysctls={"client": self.client.sysctls(TCP_SYSCTLS + tuple(self.client_host.sysctls)),
                     "server": self.server.sysctls(TCP_SYSCTLS + tuple(self.server_host.sysctls))},
            sndbuf_requested=sndbuf,
            rcvbuf_requested=rcvbuf,
            sender=sender_record,
            receiver=receiver_record,
            offloads=dict(self.offloads),
            qdiscs=_stats_delta(stats_before, stats_after),
            interfaces={end: {k: v - counters_before[end][k] for k, v in counts.items()}
                        for end, counts in counters_after.items()},
        )

    def measure_advertised_window(self, *, rcvbuf=None, nbytes=None, direction="download"):
        """The largest window the receiver advertised during a transfer, as the sender saw it (TCP_INFO snd_wnd).

        rcvbuf sets SO_RCVBUF on the receiver (None: autotuning from tcp_rmem); the receiver
        reads as fast as it can, so the window is limited by the buffer alone (C8).
        """
        if nbytes is None:
            nbytes = max(2_000_000, 20 * (2 * _buffer_bytes("rcvbuf", rcvbuf) if rcvbuf else 0))
        result = self.transfer(nbytes, direction=direction, rcvbuf=rcvbuf, sample_interval=0.001)
        windows = [w for w in result.tcp_info_series("snd_wnd") if w is not None]
        windows.append(result.sender_tcp_info.get("snd_wnd"))
        if not any(windows):
            raise MissingCapability("tcpi_snd_wnd", f"kernel {result.kernel} does not report snd_wnd in TCP_INFO")
        receiver = self.client if direction == "download" else self.server
        return WindowProbe(window_bytes=max(w for w in windows if w is not None), rcvbuf_requested=rcvbuf,
                           rcvbuf_effective=result.receiver["buffers"]["rcvbuf"], kernel=result.kernel,
                           sysctls=result.sysctls[receiver.role], transfer=result)

    def _run_flow(self, direction, sender_opts, receiver_opts, timeout):
        """Start the bulk workload (server listens, client connects); return (sender, receiver) records."""
        sender = self.server if direction == "download" else self.client
        listener_role = "sender" if sender is self.server else "receiver"
        client_role = "receiver" if listener_role == "sender" else "sender"
        server_opts = sender_opts if listener_role == "sender" else receiver_opts
        client_opts = receiver_opts if listener_role == "sender" else sender_opts
        with measurement_slot(timeout):
            server_proc = self.server.popen(
                [sys.executable, BULK_SCRIPT, "serve", f"--role={listener_role}", f"--bind={self.server.address}",
                 *server_opts], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            try:
                port = _await_listening(server_proc, timeout)
                client_proc = self.client.popen(
                    [sys.executable, BULK_SCRIPT, "connect", f"--role={client_role}", f"--to={self.server.address}",
                     f"--port={port}", *client_opts], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                deadline = time.monotonic() + timeout
                client_record = _await_result(client_proc, deadline, "client")
                server_record = _await_result(server_proc, deadline, "server")
            finally:
                for node in (self.server, self.client):
                    node.processes.stop_all()
        if listener_role == "sender":
            return server_record, client_record
        return client_record, server_record

    def close(self):
        """Stop our processes, then remove the namespaces (which removes the veths and qdiscs)."""
        if self.closed:
            return
        self.closed = True
        errors = []
        for node in self.nodes:
            node.processes.stop_all()
        for name in reversed(self._created):
            try:
                netlink.remove_namespace(name)
            except OSError as exc:
                errors.append(f"{name}: {exc}")
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
    """

    def __init__(self, *, sweep=True, endpoint_offloads="wire"):
        if endpoint_offloads not in ("wire", "kernel", True, False):
            raise ValueError(f"endpoint_offloads: must be 'wire', 'kernel', True or False, got {endpoint_offloads!r}")
        self._pairs = []
        self._lock = threading.Lock()
        self._endpoint_offloads = endpoint_offloads
        self.closed = False
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


@atexit.register
def _close_forgotten_labs():
    """Last line of defence for scripts that never closed their lab (pytest closes it in fixtures)."""
    for lab in list(_open_labs):
        with contextlib.suppress(Exception):
            lab.close()


def _positive_int(name, value):
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"{name}: must be a positive int (bytes), got {value!r}")
    return value


def _buffer_bytes(name, value):
    nbytes = parse_size(value, name)
    if nbytes <= 0 or nbytes != int(nbytes) or nbytes > 2**31 - 1:
        raise ValueError(f"{name}: must be a whole number of bytes in 1..2^31-1 (or a size like '16kb'), "
                         f"got {value!r}")
    return int(nbytes)


def _default_timeout(nbytes, link):
    """Generous deadline: 10x the time at the slowest shaped rate (or 1 Mbit/s) plus start-up."""
    rates = [w.rate_bps for w in (link.toward_client, link.toward_server) if w.rate_bps]
    slowest = min(rates + [1e6]) if rates else 1e6
    return max(60.0, 10 * transfer_time(nbytes, slowest) + 30 * link.rtt_s)


def _await_listening(proc, timeout):
    """Wait for the server's 'listening' line; return its port."""
    line = _read_line(proc, time.monotonic() + timeout)
    if not line:
        proc.wait(timeout=5)
        raise LabError(f"bulk server did not start: exit {proc.returncode}: {proc.stderr.read().strip()}")
    return json.loads(line)["port"]


def _await_result(proc, deadline, who):
    line = _read_line(proc, deadline)
    try:
        proc.wait(timeout=max(0.1, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        raise LabError(f"bulk {who} did not finish before the deadline") from None
    if not line:
        raise LabError(f"bulk {who} failed: exit {proc.returncode}: {proc.stderr.read().strip()}")
    return json.loads(line)


def _read_line(proc, deadline):
    """Read one stdout line, giving up at the deadline (the reader thread keeps the wait bounded)."""
    holder = []
    reader = threading.Thread(target=lambda: holder.append(proc.stdout.readline()), daemon=True)
    reader.start()
    reader.join(max(0.0, deadline - time.monotonic()))
    if reader.is_alive():
        raise LabError(f"no output from pid {proc.pid} before the deadline")
    return holder[0] if holder else ""


def _stats_delta(before, after):
    """Per-qdisc counters accumulated during the transfer."""
    delta = {}
    for ifname, qdiscs in after.items():
        old = {(q["kind"], q["handle"]): q for q in before.get(ifname, [])}
        rows = []
        for q in qdiscs:
            prev = old.get((q["kind"], q["handle"]), {})
            rows.append({**q, **{k: q[k] - prev.get(k, 0) for k in ("packets", "bytes", "drops", "overlimits")}})
        delta[ifname] = rows
    return delta


_SLOT_DIR = "/run/lock"


@contextlib.contextmanager
def measurement_slot(timeout):
    """Hold one of N machine-wide measurement slots (flock), so xdist workers don't measure each other's CPU load.

    N = TCPNET_MEASUREMENT_SLOTS, default max(1, cores // 2): a bulk flow keeps a sender and a
    receiver busy, one core each (DESIGN pitfall 5).
    """
    slots = int(os.environ.get("TCPNET_MEASUREMENT_SLOTS", max(1, (os.cpu_count() or 2) // 2)))
    directory = _SLOT_DIR if os.path.isdir(_SLOT_DIR) and os.access(_SLOT_DIR, os.W_OK) else "/tmp"
    deadline = time.monotonic() + timeout
    while True:
        for slot in range(slots):
            fd = os.open(os.path.join(directory, f"pytest-tcpnet-slot-{slot}.lock"), os.O_CREAT | os.O_RDWR, 0o666)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                continue
            try:
                yield slot
            finally:
                fcntl.flock(fd, fcntl.LOCK_UN)
                os.close(fd)
            return
        if time.monotonic() > deadline:
            raise LabError(f"no measurement slot free within {timeout:.0f} s")
        time.sleep(0.01)
