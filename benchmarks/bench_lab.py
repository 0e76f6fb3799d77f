"""Build + tear down one shaped client-router-server path: pytest-tcpnet (pyroute2) vs the iproute2 CLI.

Run as root: python benchmarks/bench_lab.py [rounds]. Both sides build the same thing
(3 namespaces, 2 veth pairs, addresses, routes, forwarding, htb + pfifo on both router
egresses) and remove it; the ratio is printed from medians measured in one run,
interleaved so machine noise hits both alike. The CLI side is the baseline DESIGN.md
quotes (~60 ms); it shells out to `ip`/`tc`, which only a benchmark may do.
"""

import statistics
import subprocess
import sys
import time

from pytest_tcpnet import Lab, Link


def build_with_pytest_tcpnet(lab):
    pair = lab.pair(link=Link(rate="100mbit"))
    pair.close()


def build_with_iproute2(n):
    c, r, s = f"bench-{n}-c", f"bench-{n}-r", f"bench-{n}-s"
    script = f"""
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
for dev in veth-cli veth-srv; do
  tc -n {r} qdisc add dev $dev root handle 1: htb default 1
  tc -n {r} class add dev $dev parent 1: classid 1:1 htb rate 100mbit burst 12500 quantum 12500
  tc -n {r} qdisc add dev $dev parent 1:1 handle 10: pfifo limit 1000
done
ip netns del {c}; ip netns del {r}; ip netns del {s}
"""
    subprocess.run(["sh", "-c", script], check=True)


def main():
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 20
    ours, cli = [], []
    with Lab() as lab:
        build_with_pytest_tcpnet(lab)  # warm-up: imports, capability probes
        for n in range(rounds):
            t0 = time.perf_counter()
            build_with_pytest_tcpnet(lab)
            t1 = time.perf_counter()
            build_with_iproute2(n)
            t2 = time.perf_counter()
            ours.append(t1 - t0)
            cli.append(t2 - t1)
    a, b = statistics.median(ours), statistics.median(cli)
    print(f"rounds: {rounds}")
    print(f"pytest-tcpnet (pyroute2, offloads + counters included): median {a * 1e3:.1f} ms")
    print(f"iproute2 CLI (ip/tc processes):                         median {b * 1e3:.1f} ms")
    print(f"ratio pytest-tcpnet / CLI: {a / b:.2f}")


if __name__ == "__main__":
    main()
