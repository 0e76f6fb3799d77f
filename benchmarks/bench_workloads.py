"""Workloads side by side on one unshaped pair: bulk vs iperf3 vs HTTP goodput, and what starting one flow costs.

Run as root: python benchmarks/bench_workloads.py [--rounds N] [--bytes B] [--seconds S].
Interleaved rounds, medians. The VM column: `python benchmarks/bench_vm.py --workloads` runs this
script in a fast-booted guest (with fewer bytes: the guest carries ~0.6 Gbit/s).
Flow start: a flow forked from the preloaded zygote (what workloads do), Node.spawn of a user's
function, against a fresh interpreter started in the namespace (what a script-per-flow design pays).
observe() overhead: a user's own sender and receiver (benchapp.py, spawned) on a 1 Gbit/s path,
goodput with and without observe() around them, and the sampler's CPU share. Star sampling: a star's shared client
read by one sampler per pair against one per namespace, on the same flows. Start spread: how far apart flows asked to
start at once were ready, and how far apart the start gate let them go (--start-spread: only that).
"""

import argparse
import os
import statistics
import sys
import threading
import time

import benchapp
from bench_lab import row

from pytest_tcpnet import Lab, Link
from pytest_tcpnet.workload.flows import bulk_endpoint
from pytest_tcpnet.workload.spawn import NamespaceChild, zygote_pid


def median(values):
    return statistics.median(values)


def start_zygote_flow(node):
    """Fork a bulk server into the namespace and wait until it listens."""
    child = NamespaceChild(
        node.processes.netns_path,
        bulk_endpoint,
        dict(mode="serve", role="receiver", address=node.address, timeout=5),
        name="bench",
    )
    child.receive(time.monotonic() + 60, "listening")
    child.stop()


def start_fresh_interpreter(node):
    """A new Python in the namespace importing what a stdlib flow script needs, then exiting."""
    node.run([sys.executable, "-c", "import socket, json, struct, time"], timeout=60, check=True)


def spawn_nothing(node):
    """Node.spawn of a function that does nothing, from the call to its result (what a user's spawn costs)."""
    node.spawn(benchapp.nothing).result(timeout=60)


def observed_goodput(pair, nbytes, interval):
    """A user's program moves nbytes (its own goodput), alone (interval None) or inside observe(sample_interval=interval).

    Returns (goodput bit/s, this process's CPU seconds per wall second meanwhile: the sampler's share,
    since the program runs in processes of its own)."""

    def move():
        receiver = pair.server.spawn(benchapp.receive, pair.server.address, 9100, nbytes)
        pair.client.spawn(benchapp.send, pair.server.address, 9100, nbytes).result(timeout=120)
        return receiver.result(timeout=120)

    wall, cpu = time.monotonic(), time.process_time()
    if interval is None:
        bps = move()
    else:
        with pair.observe(sample_interval=interval):
            bps = move()
    return bps, (time.process_time() - cpu) / (time.monotonic() - wall)


def observe_overhead(rounds, nbytes, rate="1gbit"):
    """Goodput of the same user transfer with and without observe() on a rate-limited path, interleaved rounds."""
    runs = {"alone": [], "observe (10 ms)": [], "observe (1 ms)": []}
    share = {name: [] for name in runs}
    with Lab() as lab:
        pair = lab.pair(link=Link(rate=rate))
        for _ in range(rounds):
            for name, interval in (("alone", None), ("observe (10 ms)", 0.01), ("observe (1 ms)", 0.001)):
                bps, cpu = observed_goodput(pair, nbytes, interval)
                runs[name].append(bps)
                share[name].append(cpu)
    alone = median(runs["alone"])
    section = "observe"
    row(
        section,
        f"a user's {nbytes / 1e6:g} MB at {rate}, alone: goodput",
        alone / 1e6,
        "Mbit/s",
        note=f"median of {rounds}; min {min(runs['alone']) / 1e6:.1f}, max {max(runs['alone']) / 1e6:.1f}; "
        f"this process meanwhile {median(share['alone']) * 100:.1f}% of a core",
    )
    for name in ("observe (10 ms)", "observe (1 ms)"):
        ratio = median(runs[name]) / alone
        row(
            section,
            f"goodput inside {name} / alone",
            ratio,
            "x",
            goal=">= 0.97",
            met=ratio >= 0.97,
            note=f"median {median(runs[name]) / 1e6:.1f} Mbit/s",
        )
        row(
            section,
            f"sampler CPU share inside {name}",
            median(share[name]) * 100,
            "% core",
            note="this process's CPU per wall second while the program (own processes) runs, "
            "sock_diag dumps of both namespaces decoded by pyroute2",
        )


def probe_cost(rounds, seconds=3, rate="100mbit"):
    """The latency probe's cost and error: goodput of one download with and without the probe beside it
    (interleaved rounds), and the probe's idle RTT on an unshaped path (its error: the path's own RTT is ~0.05 ms)."""
    from pytest_tcpnet import Flow

    alone, probed, idle = [], [], []
    with Lab() as lab:
        shaped, unshaped = lab.pair(link=Link(rate=rate)), lab.pair()
        for _ in range(rounds):
            alone.append(shaped.transfer(duration=seconds, sample_interval=0).throughput_bps)
            result = shaped.latency_under_load(
                duration=seconds, flows=[Flow(duration=seconds)], idle=0.5, sample_interval=0
            )
            probed.append(result.flows.total_bps)
            idle.append(unshaped.latency_under_load(duration=1, flows=[], idle=1.0).idle_rtt_s)
    ratio = median(probed) / median(alone)
    row(
        "probe",
        f"download at {rate} beside the latency probe / alone",
        ratio,
        "x",
        goal=">= 0.98",
        met=ratio >= 0.98,
        note=f"medians of {rounds}: {median(probed) / 1e6:.2f} vs {median(alone) / 1e6:.2f} Mbit/s (probe every 10 ms)",
    )
    row(
        "probe",
        "probe's idle RTT on an unshaped host path (its error)",
        median(idle) * 1e3,
        "ms",
        goal="<= 1",
        met=median(idle) <= 0.001,
        note=f"median of {rounds} medians of 100 probes; max {max(idle) * 1e3:.3f} ms",
    )


def star_sampling(rounds, servers=8, seconds=3.0, interval=0.02):
    """Sampling a star's flows: one sampler per pair (each reads the shared client's namespace again) against the one
    SharedSampler a measurement uses now (each namespace once per sample), side by side on the same running flows.

    Returns nothing; prints this process's CPU per wall second for each, and the client-namespace reads per sample."""
    from pytest_tcpnet import Flow
    from pytest_tcpnet.measure.sampler import SharedSampler, SocketSampler

    cpu = {"none": [], "one sampler per pair": [], "one per namespace (SharedSampler)": []}
    with Lab() as lab:
        star = lab.star(servers=servers, links=Link(rate="20mbit"))
        ends = [{"client": p.client.namespace, "server": p.server.namespace} for p in star.pairs]
        families = star.pairs[0].world.socket_families
        for _ in range(rounds):
            for name in cpu:
                runner = threading.Thread(
                    target=star.concurrent,
                    args=([Flow(duration=seconds + 1, cc="cubic") for _ in star.pairs],),
                    kwargs={"sample_interval": False},  # the samplers under test are the only ones
                )
                runner.start()
                time.sleep(0.5)  # the flows are running
                wall, used = time.monotonic(), time.process_time()
                if name == "none":
                    time.sleep(seconds - 0.5)
                elif name == "one sampler per pair":
                    samplers = [SocketSampler(e, interval, families=families).start() for e in ends]
                    time.sleep(seconds - 0.5)
                    for one in samplers:
                        one.stop()
                else:
                    shared = SharedSampler([(e, interval, None) for e in ends], families).start()
                    time.sleep(seconds - 0.5)
                    shared.stop()
                cpu[name].append((time.process_time() - used) / (time.monotonic() - wall))
                runner.join()
    base = median(cpu["none"])
    for name, values in cpu.items():
        row(
            "star",
            f"{servers}-server star, samplers every {interval * 1e3:g} ms: {name}",
            median(values) * 100,
            "% core",
            note=f"median of {rounds}; this process's CPU per wall second while 8 cubic flows run (unsampled)",
        )
    per_pair = median(cpu["one sampler per pair"]) - base
    shared = median(cpu["one per namespace (SharedSampler)"]) - base
    row(
        "star",
        "sampling CPU of one sampler per namespace / one per pair",
        shared / per_pair,
        "x",
        note=f"each less the flows alone; namespaces read per sample {servers + 1} against {2 * servers}, the "
        f"client's {servers} sockets decoded once per sample against {servers} times",
    )


def _spread_ms(times):
    return (max(times) - min(times)) * 1e3


def start_spread(rounds, servers=3):
    """Flows asked to start at once on a star's servers: how far apart they came to the start gate (when each was
    ready: where it would have started without the gate) against how far apart they went (bulk: their first
    writes; iperf3 and curl: their clients' release, before they connect). One run gives both: no switch turns the
    gate off.

    Returns nothing; prints the medians over rounds, in ms, and their ratio."""
    from pytest_tcpnet import Flow
    from pytest_tcpnet.workload.http import HttpDownload
    from pytest_tcpnet.workload.iperf3 import Iperf3

    spreads = {"bulk": ([], []), "iperf3": ([], []), "curl": ([], [])}
    with Lab() as lab:
        star = lab.star(servers=servers, links=Link(rate="20mbit"))
        for _ in range(rounds):
            senders = [flow.sender for flow in star.concurrent([Flow(duration=1) for _ in star.pairs]).flows]
            spreads["bulk"][0].append(_spread_ms([end.extra["gated_at"] for end in senders]))
            spreads["bulk"][1].append(_spread_ms([end.first_write_at for end in senders]))
            for name, workload in (("iperf3", lambda: Iperf3(duration=1)), ("curl", lambda: HttpDownload(1_000_000))):
                clients = [run.flows[0].receiver for run in star.run([workload() for _ in star.pairs])]
                spreads[name][0].append(_spread_ms([end.extra["gated_at"] for end in clients]))
                spreads[name][1].append(_spread_ms([end.extra["released_at"] for end in clients]))
    kernel = os.uname().release
    for name, (ready, went) in spreads.items():
        moved = "first writes" if name == "bulk" else "clients released"
        row(
            "gate",
            f"{servers} {name} flows at once, start spread: ready / with the gate ({kernel})",
            median(ready) / max(median(went), 1e-3),
            "x",
            note=f"median of {rounds}: ready {median(ready):.1f} ms apart (max {max(ready):.1f}), {moved} "
            f"{median(went):.2f} ms apart (max {max(went):.2f})",
        )


def main(rounds=5, nbytes=1_000_000_000, seconds=3, observe_bytes=250_000_000):
    with Lab() as lab:
        pair = lab.pair()
        zygote_pid()  # started once per session; not part of a flow's cost
        starts = {"zygote fork": [], "Node.spawn": [], "fresh interpreter": []}
        size = f"{nbytes / 1e6:g} MB"
        goodput = {f"bulk ({size})": [], f"iperf3 ({seconds} s)": [], f"http + curl ({size})": []}
        for _ in range(rounds):
            for name, start in (
                ("zygote fork", start_zygote_flow),
                ("Node.spawn", spawn_nothing),
                ("fresh interpreter", start_fresh_interpreter),
            ):
                t0 = time.perf_counter()
                start(pair.server)
                starts[name].append(time.perf_counter() - t0)
            goodput[f"bulk ({size})"].append(pair.transfer(nbytes, sample_interval=0).throughput_bps)
            goodput[f"iperf3 ({seconds} s)"].append(pair.iperf3(duration=seconds, sample_interval=0).throughput_bps)
            goodput[f"http + curl ({size})"].append(pair.http_download(nbytes, sample_interval=0).throughput_bps)
    kernel = os.uname().release
    print(f"workloads on an unshaped pair, kernel {kernel}, {os.cpu_count()} cores, {rounds} interleaved rounds")
    for name, values in goodput.items():
        print(
            f"  {name:22s} median {median(values) / 1e9:6.2f} Gbit/s  (min {min(values) / 1e9:.2f}, "
            f"max {max(values) / 1e9:.2f})"
        )
    zygote, fresh = median(starts["zygote fork"]), median(starts["fresh interpreter"])
    print(
        f"  start one flow: zygote fork {zygote * 1e3:.1f} ms, fresh interpreter {fresh * 1e3:.1f} ms "
        f"(ratio {fresh / zygote:.1f}x; zygote runs {', '.join(f'{s * 1e3:.0f}' for s in starts['zygote fork'])} ms)"
    )
    spawned = median(starts["Node.spawn"])
    row(
        "spawn",
        f"Node.spawn of a function, call to result ({kernel})",
        spawned * 1e3,
        "ms",
        note=f"median of {rounds}; a fresh interpreter in the namespace: {fresh * 1e3:.1f} ms ({fresh / spawned:.1f}x)",
    )
    if observe_bytes:
        observe_overhead(rounds, observe_bytes)
    probe_cost(rounds)
    star_sampling(rounds)
    start_spread(rounds)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--bytes", type=int, default=1_000_000_000, help="bytes per bulk and HTTP transfer")
    parser.add_argument("--seconds", type=int, default=3, help="length of each iperf3 run")
    parser.add_argument(
        "--observe-bytes",
        type=int,
        default=250_000_000,
        help="bytes per transfer of the observe() overhead rounds at 1 Gbit/s (0: skip them)",
    )
    parser.add_argument("--start-spread", action="store_true", help="only the start gate's spread (quick)")
    args = parser.parse_args()
    if args.start_spread:
        start_spread(args.rounds)
    else:
        main(args.rounds, args.bytes, args.seconds, args.observe_bytes)
