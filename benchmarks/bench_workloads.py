"""Workloads side by side on one unshaped pair: bulk vs iperf3 vs HTTP goodput, and what starting one flow costs.

Run as root: python benchmarks/bench_workloads.py [--rounds N] [--bytes B] [--seconds S].
Interleaved rounds, medians. The VM column: `python benchmarks/bench_vm.py --workloads` runs this
script in a fast-booted guest (with fewer bytes: the guest carries ~0.6 Gbit/s).
Flow start: a flow forked from the preloaded zygote (what workloads do) against a fresh
interpreter started in the namespace (what a script-per-flow design pays).
"""

import argparse
import os
import statistics
import sys
import time

from pytest_tcpnet import Lab
from pytest_tcpnet.workload.flows import bulk_endpoint
from pytest_tcpnet.workload.spawn import NamespaceChild, zygote_pid


def median(values):
    return statistics.median(values)


def start_zygote_flow(node):
    """Fork a bulk server into the namespace and wait until it listens."""
    child = NamespaceChild(node.processes.netns_path, bulk_endpoint,
                           dict(mode="serve", role="receiver", address=node.address, timeout=5), name="bench")
    child.receive(time.monotonic() + 60, "listening")
    child.stop()


def start_fresh_interpreter(node):
    """A new Python in the namespace importing what a stdlib flow script needs, then exiting."""
    node.run([sys.executable, "-c", "import socket, json, struct, time"], timeout=60, check=True)


def main(rounds=5, nbytes=1_000_000_000, seconds=3):
    with Lab() as lab:
        pair = lab.pair()
        zygote_pid()  # started once per session; not part of a flow's cost
        starts = {"zygote fork": [], "fresh interpreter": []}
        size = f"{nbytes / 1e6:g} MB"
        goodput = {f"bulk ({size})": [], f"iperf3 ({seconds} s)": [], f"http + curl ({size})": []}
        for _ in range(rounds):
            for name, start in (("zygote fork", start_zygote_flow), ("fresh interpreter", start_fresh_interpreter)):
                t0 = time.perf_counter()
                start(pair.server)
                starts[name].append(time.perf_counter() - t0)
            goodput[f"bulk ({size})"].append(pair.transfer(nbytes, sample_interval=0).throughput_bps)
            goodput[f"iperf3 ({seconds} s)"].append(pair.iperf3(duration=seconds, sample_interval=0).throughput_bps)
            goodput[f"http + curl ({size})"].append(pair.http_download(nbytes, sample_interval=0).throughput_bps)
    kernel = os.uname().release
    print(f"workloads on an unshaped pair, kernel {kernel}, {os.cpu_count()} cores, {rounds} interleaved rounds")
    for name, values in goodput.items():
        print(f"  {name:22s} median {median(values) / 1e9:6.2f} Gbit/s  (min {min(values) / 1e9:.2f}, "
              f"max {max(values) / 1e9:.2f})")
    zygote, fresh = median(starts["zygote fork"]), median(starts["fresh interpreter"])
    print(f"  start one flow: zygote fork {zygote * 1e3:.1f} ms, fresh interpreter {fresh * 1e3:.1f} ms "
          f"(ratio {fresh / zygote:.1f}x; zygote runs {', '.join(f'{s * 1e3:.0f}' for s in starts['zygote fork'])} ms)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--bytes", type=int, default=1_000_000_000, help="bytes per bulk and HTTP transfer")
    parser.add_argument("--seconds", type=int, default=3, help="length of each iperf3 run")
    args = parser.parse_args()
    main(args.rounds, args.bytes, args.seconds)
