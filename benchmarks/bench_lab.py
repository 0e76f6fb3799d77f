"""Lab speed, emulation fidelity, parallel scaling and memory, measured side by side in one run.

Run as root: python benchmarks/bench_lab.py [--quick] [--only SECTION ...]. Prints a table and
one ``BENCH-ROW {json}`` line per figure (benchmarks/run.py collects them into RESULTS.md).

Sections:
- path: build + tear down of a shaped client-router-server path (htb on both router egresses,
  netem too where the kernel has it, one sysctl per endpoint) with pytest-tcpnet and with the
  iproute2 command line, interleaved so machine noise hits both alike: median, p95, ratio.
- sweep: 200 paths built and torn down in a row, plus the time the kernel then needs to finish
  the namespace deletions it defers (until its workers go quiet):
  total / 200 is the honest per-path cost.
- steps: where one path's time goes (namespace create, wiring, offloads, qdiscs, removal).
- example: per-example overhead of a sweep: build + a 1-byte transfer + teardown minus the
  data phase, with the process's RSS after each example (it must not grow per example).
- dumbbell: build + tear down of a 4-pair dumbbell (10 namespaces, the bottleneck shaped both
  ways) with pytest-tcpnet and with the iproute2 command line, interleaved: median, ratio.
- parallel: paths per second with 1 and 2 worker processes.
- rate: htb at 10/100/1000 Mbit/s vs a bulk flow's goodput (payload rate = rate * 1448/1514).
- rtt, loss: netem delay (10/50/200 ms) vs TCP's min_rtt, netem loss (1%, 10%) vs the netem
  qdisc's drops / (drops + packets); only where the kernel has sch_netem (the VM).
The CLI side shells out to `ip`/`tc`, which only a benchmark may do.
"""

import argparse
import json
import multiprocessing
import os
import resource
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from pytest_tcpnet import Host, Lab, Link, netlink  # noqa: E402

CLIENT = Host(sysctls={"net.ipv4.tcp_rmem": "4096 131072 6291456"})
SERVER = Host(sysctls={"net.ipv4.tcp_wmem": "4096 16384 4194304"})
MODEL_PAYLOAD = 1448 / 1514  # TCP payload per full Ethernet frame (timestamps on)


def row(section, metric, value, unit, goal=None, met=None, note=""):
    """Print one figure for humans and for run.py."""
    record = {
        "section": section,
        "metric": metric,
        "value": value,
        "unit": unit,
        "goal": goal,
        "met": met,
        "note": note,
    }
    shown = f"{value:.2f}" if isinstance(value, float) else str(value)
    verdict = "" if met is None else ("  MET" if met else "  NOT MET")
    print(f"{section:9s} {metric:58s} {shown:>10s} {unit:6s} {goal or '':>14s}{verdict} {note}")
    print("BENCH-ROW " + json.dumps(record), flush=True)


def p95(values):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]


def netem_available():
    return netlink.qdisc_supported("netem")


def shaped_link():
    """The path the speed goals speak of: htb both ways, plus netem delay where the kernel has it."""
    return Link(rate="100mbit", rtt="10ms") if netem_available() else Link(rate="100mbit")


def build_with_pytest_tcpnet(lab, link):
    lab.pair(link=link, client=CLIENT, server=SERVER).close()


def cli_script(n, netem):
    c, r, s = f"bench-{os.getpid()}-{n}-c", f"bench-{os.getpid()}-{n}-r", f"bench-{os.getpid()}-{n}-s"
    leaf = "netem delay 5ms limit 1000" if netem else "pfifo limit 1000"
    return f"""
set -e
ip netns add {c}; ip netns add {r}; ip netns add {s}
ip -n {r} link add veth-cli type veth peer name veth-rtr netns {c}
ip -n {r} link add veth-srv type veth peer name veth-rtr netns {s}
ip -n {r} addr add 198.18.0.1/24 dev veth-cli; ip -n {r} addr add 198.19.0.1/24 dev veth-srv
ip -n {c} addr add 198.18.0.2/24 dev veth-rtr; ip -n {s} addr add 198.19.0.2/24 dev veth-rtr
for ns in {c} {r} {s}; do ip -n $ns link set lo up; done
ip -n {r} link set veth-cli up; ip -n {r} link set veth-srv up
ip -n {c} link set veth-rtr up; ip -n {s} link set veth-rtr up
ip -n {c} route add 198.19.0.0/24 via 198.18.0.1; ip -n {s} route add 198.18.0.0/24 via 198.19.0.1
ip netns exec {r} sysctl -qw net.ipv4.ip_forward=1
ip netns exec {c} sysctl -qw net.ipv4.tcp_rmem="4096 131072 6291456"
ip netns exec {s} sysctl -qw net.ipv4.tcp_wmem="4096 16384 4194304"
for dev in veth-cli veth-srv; do
  tc -n {r} qdisc add dev $dev root handle 1: htb default 1
  tc -n {r} class add dev $dev parent 1: classid 1:1 htb rate 100mbit burst 12500 quantum 12500
  tc -n {r} qdisc add dev $dev parent 1:1 handle 10: {leaf}
done
ip netns del {c}; ip netns del {r}; ip netns del {s}
"""


def build_with_iproute2(n, netem):
    subprocess.run(["sh", "-c", cli_script(n, netem)], check=True)


def kworker_cpu_s():
    """CPU seconds all kernel workers have used so far (namespace deletion runs in them, deferred)."""
    ticks = 0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                text = f.read()
        except OSError:
            continue
        comm, rest = text[text.index("(") + 1 : text.rindex(")")], text[text.rindex(")") + 2 :].split()
        if comm.startswith("kworker"):
            ticks += int(rest[11]) + int(rest[12])  # utime + stime
    return ticks / os.sysconf("SC_CLK_TCK")


def wait_for_deferred_cleanup(limit_s=60.0, window_s=0.2, quiet_s=0.01):
    """Seconds until kernel workers go quiet (< quiet_s CPU per window): the namespaces' deferred deletion is done."""
    t0 = time.perf_counter()
    last = kworker_cpu_s()
    while time.perf_counter() - t0 < limit_s:
        time.sleep(window_s)
        now = kworker_cpu_s()
        if now - last < quiet_s:
            return time.perf_counter() - t0 - window_s
        last = now
    return time.perf_counter() - t0


def section_path(rounds):
    netem = netem_available()
    link = shaped_link()
    ours, cli, ours_cpu, cli_cpu = [], [], [], []
    with Lab() as lab:
        build_with_pytest_tcpnet(lab, link)  # warm-up: imports, capability probes
        build_with_iproute2("warm", netem)
        for n in range(rounds):
            c0, t0 = os.times(), time.perf_counter()
            build_with_pytest_tcpnet(lab, link)
            c1, t1 = os.times(), time.perf_counter()
            build_with_iproute2(n, netem)
            c2, t2 = os.times(), time.perf_counter()
            ours.append(t1 - t0)
            cli.append(t2 - t1)
            # CPU, unlike wall time, hardly moves with the other users of the machine.
            ours_cpu.append(c1.user + c1.system - c0.user - c0.system)
            cli_cpu.append(c2.children_user + c2.children_system - c1.children_user - c1.children_system)
    what = "htb+netem" if netem else "htb+pfifo (no netem here)"
    a, b = statistics.median(ours), statistics.median(cli)
    row(
        "path",
        f"build+teardown, {what}: pytest-tcpnet median",
        a * 1e3,
        "ms",
        "<= 15",
        a * 1e3 <= 15,
        f"{rounds} rounds",
    )
    row("path", "build+teardown: pytest-tcpnet p95", p95(ours) * 1e3, "ms")
    row("path", "build+teardown: iproute2 CLI median", b * 1e3, "ms")
    row("path", "build+teardown: iproute2 CLI p95", p95(cli) * 1e3, "ms")
    row("path", "speed-up over the CLI (CLI median / ours)", b / a, "x", ">= 4", b / a >= 4)
    # Each round's two builds ran back to back, so their ratio sees the same machine load.
    row(
        "path",
        "speed-up over the CLI, median of per-round ratios",
        statistics.median(c / o for c, o in zip(cli, ours)),
        "x",
    )
    oc, cc = sum(ours_cpu) / rounds, sum(cli_cpu) / rounds
    row(
        "path",
        "CPU per path: pytest-tcpnet (all threads) / CLI (its processes)",
        oc * 1e3,
        "ms",
        None,
        None,
        f"CLI {cc * 1e3:.1f} ms, {cc / oc:.1f}x; kernel workers not counted for either",
    )
    return a


def section_sweep(count, per_path_median):
    link = shaped_link()
    with Lab() as lab:
        build_with_pytest_tcpnet(lab, link)
        wait_for_deferred_cleanup(10)
        cpu0, t0 = kworker_cpu_s(), time.perf_counter()
        for _ in range(count):
            build_with_pytest_tcpnet(lab, link)
        loop = time.perf_counter() - t0
        deferred = wait_for_deferred_cleanup()
        kernel_cpu = kworker_cpu_s() - cpu0
    total = loop + deferred
    row(
        "sweep",
        f"{count} paths in a row: per path incl. deferred kernel cleanup",
        total / count * 1e3,
        "ms",
        "<= 15",
        total / count * 1e3 <= 15,
        f"loop {loop:.2f} s + deferred {deferred:.2f} s; kworker CPU {kernel_cpu / count * 1e3:.1f} ms/path",
    )
    if per_path_median:
        ratio = (total / count) / per_path_median
        row("sweep", "per-path in a sweep / isolated median", ratio, "x", "<= 1.2", ratio <= 1.2)


def section_steps(rounds):
    """Time each netlink step of one path, averaged over rounds (the profile behind the goals)."""
    from pytest_tcpnet import lab as lab_module

    timings = {}
    real = {}
    names = [
        "create_namespaces",
        "create_namespace",
        "remove_namespace",
        "remove_namespaces",
        "wire",
        "write_sysctls",
        "set_offloads",
        "get_offloads",
        "shape_egress",
        "shape_egress_classes",
    ]

    def timed(name, function):
        def wrapper(*args, **kwargs):
            t0 = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                timings.setdefault(name, []).append(time.perf_counter() - t0)

        return wrapper

    sessions = getattr(lab_module.netlink, "NamespaceSession", None)
    for name in names:
        if hasattr(lab_module.netlink, name):
            real[name] = getattr(lab_module.netlink, name)
            setattr(lab_module.netlink, name, timed(name, real[name]))
    if sessions is not None:
        for method in (
            "create_many",
            "close",
            "wire_router",
            "configure_endpoint",
            "set_offloads",
            "shape_egress",
            "write_sysctls",
        ):
            if hasattr(sessions, method):
                real["NamespaceSession." + method] = getattr(sessions, method)
                setattr(sessions, method, timed("session." + method, getattr(sessions, method)))
    try:
        link = shaped_link()
        with Lab() as lab:
            build_with_pytest_tcpnet(lab, link)
            timings.clear()
            t0 = time.perf_counter()
            for _ in range(rounds):
                build_with_pytest_tcpnet(lab, link)
            whole = (time.perf_counter() - t0) / rounds
    finally:
        for name, function in real.items():
            if name.startswith("NamespaceSession."):
                setattr(sessions, name.split(".", 1)[1], function)
            else:
                setattr(lab_module.netlink, name, function)
    row("steps", "whole path (build + teardown), mean", whole * 1e3, "ms")
    for name, values in sorted(timings.items(), key=lambda kv: -sum(kv[1])):
        row("steps", f"{name}: per path ({len(values) // rounds} calls)", sum(values) / rounds * 1e3, "ms")


def _rss_kib():
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))


def section_example(count):
    """Per-example overhead of a sweep (build + 1-byte transfer + teardown minus the data phase) and RSS."""
    os.environ.setdefault("TCPNET_MEASUREMENT_SLOTS", "64")  # 1-byte transfers: don't queue behind others' flows
    link = shaped_link()
    overheads, builds, transfers, closes, rss = [], [], [], [], []
    with Lab() as lab:
        lab.pair(link=link, client=CLIENT, server=SERVER).close()
        rss_first_lab = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        for n in range(count):
            t0 = time.perf_counter()
            pair = lab.pair(link=link, client=CLIENT, server=SERVER)
            t1 = time.perf_counter()
            result = pair.transfer(nbytes=1)
            t2 = time.perf_counter()
            pair.close()
            t3 = time.perf_counter()
            builds.append(t1 - t0)
            transfers.append(t2 - t1 - result.duration_s)
            closes.append(t3 - t2)
            overheads.append(t3 - t0 - result.duration_s)
            lab._pairs.clear()  # a sweep's lab forgets closed pairs
            lab._worlds.clear()
            # The session report keeps every result (its rows, and plots of a failing test's flows):
            # ~26 KiB per 1-byte result here, by design. Cleared, what is left of growth is a leak.
            lab.results.clear()
            if n in (9, count - 1):
                rss.append(_rss_kib())
    m = statistics.median(overheads) * 1e3
    row(
        "example",
        "per-example overhead (all but the data phase), median",
        m,
        "ms",
        "<= 50",
        m <= 50,
        f"{count} examples",
    )
    row("example", "  of which build", statistics.median(builds) * 1e3, "ms")
    row("example", "  of which transfer() minus its data phase", statistics.median(transfers) * 1e3, "ms")
    row("example", "  of which teardown", statistics.median(closes) * 1e3, "ms")
    row("memory", "peak RSS after the first lab + pair", rss_first_lab / 1024, "MiB")
    growth = (rss[-1] - rss[0]) / (count - 10)
    row(
        "memory",
        f"RSS growth per example, results cleared (example 10 -> {count})",
        growth,
        "KiB",
        "~0",
        growth < 16,
        f"RSS {rss[0] / 1024:.1f} -> {rss[-1] / 1024:.1f} MiB; peak "
        f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.1f} MiB",
    )


def dumbbell_cli_script(n, pairs=4):
    """The same dumbbell as Lab.dumbbell(pairs, bottleneck=Link(rate="100mbit")) with ip/tc, built and deleted."""
    tag = f"bench-{os.getpid()}-{n}"
    left, right = f"{tag}-l", f"{tag}-r"
    lines = [
        "set -e",
        f"ip netns add {left}; ip netns add {right}",
        f"ip -n {left} link add veth-right type veth peer name veth-left netns {right}",
        f"ip -n {left} addr add 198.18.255.1/24 dev veth-right; ip -n {right} addr add 198.18.255.2/24 dev veth-left",
        f"ip -n {left} link set veth-right up; ip -n {right} link set veth-left up",
        f"ip -n {left} link set lo up; ip -n {right} link set lo up",
        f"ip netns exec {left} sysctl -qw net.ipv4.ip_forward=1; ip netns exec {right} sysctl -qw net.ipv4.ip_forward=1",
    ]
    for i in range(pairs):
        c, s = f"{tag}-c{i}", f"{tag}-s{i}"
        lines += [
            f"ip netns add {c}; ip netns add {s}",
            f"ip -n {left} link add veth-c{i} type veth peer name veth-left netns {c}",
            f"ip -n {right} link add veth-s{i} type veth peer name veth-right netns {s}",
            f"ip -n {left} addr add 198.18.{i}.1/24 dev veth-c{i}; ip -n {left} link set veth-c{i} up",
            f"ip -n {right} addr add 198.19.{i}.1/24 dev veth-s{i}; ip -n {right} link set veth-s{i} up",
            f"ip -n {c} addr add 198.18.{i}.2/24 dev veth-left; ip -n {c} link set veth-left up; ip -n {c} link set lo up",
            f"ip -n {s} addr add 198.19.{i}.2/24 dev veth-right; ip -n {s} link set veth-right up; ip -n {s} link set lo up",
            f"ip -n {c} route add 198.18.0.0/15 via 198.18.{i}.1; ip -n {s} route add 198.18.0.0/15 via 198.19.{i}.1",
            f"ip -n {left} route add 198.19.{i}.0/24 via 198.18.255.2; ip -n {right} route add 198.18.{i}.0/24 via 198.18.255.1",
        ]
    for ns, dev in ((left, "veth-right"), (right, "veth-left")):
        lines += [
            f"tc -n {ns} qdisc add dev {dev} root handle 1: htb default 1",
            f"tc -n {ns} class add dev {dev} parent 1: classid 1:1 htb rate 100mbit burst 12500 quantum 12500",
            f"tc -n {ns} qdisc add dev {dev} parent 1:1 handle 10: pfifo limit 1000",
        ]
    lines.append(
        "for ns in "
        + " ".join([left, right] + [f"{tag}-{k}{i}" for i in range(pairs) for k in "cs"])
        + "; do ip netns del $ns; done"
    )
    return "\n".join(lines) + "\n"


def section_dumbbell(rounds):
    ours, cli = [], []
    link = Link(rate="100mbit")
    with Lab() as lab:
        lab.dumbbell(4, bottleneck=link).close()  # warm-up
        subprocess.run(["sh", "-c", dumbbell_cli_script("warm")], check=True)
        for n in range(rounds):
            t0 = time.perf_counter()
            lab.dumbbell(4, bottleneck=link).close()
            t1 = time.perf_counter()
            subprocess.run(["sh", "-c", dumbbell_cli_script(n)], check=True)
            t2 = time.perf_counter()
            ours.append(t1 - t0)
            cli.append(t2 - t1)
            lab._pairs.clear()
            lab._worlds.clear()
    a, b = statistics.median(ours), statistics.median(cli)
    row(
        "dumbbell",
        "4-pair dumbbell (10 namespaces) build+teardown: pytest-tcpnet median",
        a * 1e3,
        "ms",
        None,
        None,
        f"{rounds} rounds; p95 {p95(ours) * 1e3:.1f} ms",
    )
    row(
        "dumbbell",
        "4-pair dumbbell build+teardown: iproute2 CLI median",
        b * 1e3,
        "ms",
        None,
        None,
        f"p95 {p95(cli) * 1e3:.1f} ms",
    )
    row("dumbbell", "speed-up over the CLI (CLI median / ours)", b / a, "x", ">= 4", b / a >= 4)


def _worker(count, start, queue):
    link = shaped_link()
    with Lab(sweep=False) as lab:
        build_with_pytest_tcpnet(lab, link)
        start.wait()
        t0 = time.perf_counter()
        for _ in range(count):
            build_with_pytest_tcpnet(lab, link)
        queue.put((t0, time.perf_counter()))


def section_parallel(count):
    rates = {}
    for workers in (1, 2):
        ctx = multiprocessing.get_context("fork")
        start, queue = ctx.Event(), ctx.Queue()
        procs = [ctx.Process(target=_worker, args=(count, start, queue)) for _ in range(workers)]
        for p in procs:
            p.start()
        time.sleep(1.0)  # let every worker finish its warm-up build
        start.set()
        spans = [queue.get(timeout=300) for _ in procs]
        for p in procs:
            p.join()
        wall = max(e for _, e in spans) - min(s for s, _ in spans)
        rates[workers] = workers * count / wall
        row("parallel", f"paths built+torn down per second, {workers} worker(s)", rates[workers], "1/s")
    row("parallel", "scaling 2 workers / 1 worker", rates[2] / rates[1], "x", None, None, f"{os.cpu_count()} cores")


def section_rate(seconds):
    for rate in (10e6, 100e6, 1000e6):
        link = Link(rate=f"{int(rate)}bit")
        with Lab() as lab:
            pair = lab.pair(link=link)
            nbytes = int(rate / 8 * seconds)
            result = max((pair.transfer(nbytes=nbytes) for _ in range(2)), key=lambda r: r.throughput_bps)
            pair.close()
        share = result.throughput_bps / (rate * MODEL_PAYLOAD)
        row(
            "rate",
            f"htb {rate / 1e6:g} Mbit/s: goodput / payload rate (best of 2)",
            share * 100,
            "%",
            ">= 95",
            share >= 0.95,
            f"{result.throughput_bps / 1e6:.1f} Mbit/s over {nbytes / 1e6:.1f} MB",
        )


def section_rtt():
    if not netem_available():
        row("rtt", "netem delay vs measured RTT", "n/a", "", None, None, "no sch_netem in this kernel: see the VM run")
        return
    for rtt_ms in (10, 50, 200):
        with Lab() as lab:
            pair = lab.pair(link=Link(rtt=f"{rtt_ms}ms"))
            result = pair.transfer(nbytes=200_000)
            pair.close()
        measured = result.min_rtt_s * 1e3
        error = (measured - rtt_ms) / rtt_ms * 100
        row(
            "rtt",
            f"netem rtt {rtt_ms} ms: TCP min_rtt error",
            error,
            "%",
            "within +-5",
            abs(error) <= 5,
            f"measured {measured:.2f} ms",
        )


def section_loss(packets):
    if not netem_available():
        row("loss", "netem loss vs observed", "n/a", "", None, None, "no sch_netem in this kernel: see the VM run")
        return
    for loss in (0.01, 0.10):
        with Lab() as lab:
            pair = lab.pair(link=Link(rate="100mbit", loss=loss, rtt="2ms"))
            result = pair.transfer(nbytes=packets * 1448, timeout=600)
            pair.close()
        netem = [q for q in result.qdiscs["veth-cli"] if q["kind"] == "netem"][0]
        observed = netem["drops"] / (netem["drops"] + netem["packets"])
        row(
            "loss",
            f"netem loss {loss * 100:g}%: observed drops / offered",
            observed * 100,
            "%",
            f"{loss * 100:g} +- 2 sd",
            abs(observed - loss) <= 2 * (loss * (1 - loss) / (netem["drops"] + netem["packets"])) ** 0.5,
            f"{netem['drops']} of {netem['drops'] + netem['packets']} data-direction packets",
        )


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer rounds (for the VM, where Python is 10-50x slower)")
    ap.add_argument("--only", nargs="*", default=None)
    opts = ap.parse_args()
    q = opts.quick
    wanted = set(opts.only or ["path", "sweep", "steps", "example", "dumbbell", "parallel", "rate", "rtt", "loss"])
    where = "VM" if os.path.exists("/run/tcpnet-vm") or os.environ.get("TCPNET_IN_VM") else "host"
    print(
        f"# bench_lab on {where}: kernel {os.uname().release}, {os.cpu_count()} cores, "
        f"netem {'yes' if netem_available() else 'no'}"
    )
    median = None
    if "path" in wanted:
        median = section_path(8 if q else 40)
    if "sweep" in wanted:
        section_sweep(40 if q else 200, median)
    if "steps" in wanted:
        section_steps(5 if q else 20)
    if "example" in wanted:
        section_example(15 if q else 100)
    if "dumbbell" in wanted:
        section_dumbbell(5 if q else 20)
    if "parallel" in wanted:
        section_parallel(5 if q else 30)
    if "rate" in wanted:
        section_rate(1.0 if q else 2.0)
    if "rtt" in wanted:
        section_rtt()
    if "loss" in wanted:
        section_loss(3000 if q else 20000)


if __name__ == "__main__":
    main()
