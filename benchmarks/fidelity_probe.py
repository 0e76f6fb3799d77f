"""What a kernel backend applies and carries: the figures bench_backends.py sets side by side.

Run as a pytest file, on the host or under ``--tcpnet-vm`` with a backend (bench_backends.py does both, one
after the other). Each test measures one thing and appends rows to the JSON-lines file named by
``TCPNET_FIDELITY_OUT``; it asserts nothing about the figures (they are the output), only that it measured.
Tests that need netem skip on a host without it.
"""

import json
import os
import statistics
import time

import pytest

from pytest_tcpnet import Cbr, Host, Lab, Link, guest, model

OUT = os.environ.get("TCPNET_FIDELITY_OUT")


def record(figure, value, unit, note=""):
    """One row: the figure, its value, where it was measured."""
    if OUT:
        with open(OUT, "a", encoding="utf-8") as f:
            f.write(
                json.dumps(
                    {
                        "figure": figure,
                        "value": value,
                        "unit": unit,
                        "note": note,
                        "backend": guest.backend(),
                        "kernel": os.uname().release,
                    }
                )
                + "\n"
            )


@pytest.fixture(scope="module")
def lab():
    with Lab() as lab:
        yield lab


@pytest.mark.tcpnet_needs("netem")
@pytest.mark.parametrize("rtt_ms", [10, 50, 200])
def test_netem_rtt(lab, rtt_ms):
    """The path's base RTT as the sender's TCP_INFO min_rtt saw it, against the netem delay asked for."""
    result = lab.pair(link=Link(rtt=f"{rtt_ms}ms")).transfer(200_000)
    record(
        f"netem RTT {rtt_ms} ms: min_rtt - asked",
        (result.min_rtt_s - rtt_ms / 1e3) * 1e3,
        "ms",
        f"min_rtt {result.min_rtt_s * 1e3:.2f} ms",
    )


@pytest.mark.tcpnet_needs("netem", "cubic")
@pytest.mark.parametrize("loss", [0.01, 0.10])
def test_netem_loss(lab, loss):
    """The share of a UDP stream's datagrams that never arrived, against the loss asked for."""
    pair = lab.pair(link=Link(rate="100mbit", rtt="10ms", loss=loss))
    stream = pair.latency_under_load(duration=3, flows=[Cbr("8mbit", duration=3)], idle=0.2).udp[0]
    record(f"netem loss {loss:.0%}: observed", stream.loss * 100, "%", f"{stream.sent} datagrams")


@pytest.mark.parametrize("rate", ["10mbit", "100mbit", "1gbit", "10gbit"])
def test_htb_rate(lab, rate):
    """Goodput of a bulk download over the htb-shaped link, as a share of its payload rate."""
    bps = model.parse_rate(rate)
    result = lab.pair(link=Link(rate=rate)).transfer(duration=2.0, sndbuf=None)
    record(
        f"htb {rate}: goodput / payload rate",
        100 * result.throughput_bps / model.link_goodput(bps),
        "%",
        f"{result.throughput_bps / 1e6:.1f} Mbit/s",
    )


@pytest.mark.tcpnet_needs("netem")
def test_htb_1gbit_netem_10ms(lab):
    """htb 1 Gbit/s behind netem 10 ms RTT, buffers sized for the BDP: goodput / payload rate."""
    big = Host(sysctls={"net.ipv4.tcp_rmem": "4096 131072 8388608", "net.ipv4.tcp_wmem": "4096 65536 8388608"})
    result = lab.pair(link=Link(rate="1gbit", rtt="10ms"), client=big, server=big).transfer(duration=3.0, sndbuf=None)
    record(
        "htb 1 Gbit/s + netem 10 ms RTT: goodput / payload rate",
        100 * result.throughput_bps / model.link_goodput(1e9),
        "%",
        f"{result.throughput_bps / 1e6:.0f} Mbit/s",
    )


def test_unshaped_bulk(lab):
    """An unshaped 2 s bulk download: what one flow of this backend carries."""
    result = lab.pair(link=Link()).transfer(duration=2.0, sndbuf=None)
    record("unshaped bulk, one flow", result.throughput_bps / 1e9, "Gbit/s")


def test_advertised_window(lab):
    """C8: the window advertised for SO_RCVBUF 64 KB."""
    probe = lab.pair().measure_advertised_window(rcvbuf=65536)
    record(
        "C8: window advertised for SO_RCVBUF 64 KB",
        probe.window_bytes / 1e3,
        "kB",
        f"model {model.advertised_window(65536, kernel=probe.kernel, sysctls=probe.sysctls) / 1e3:.1f} kB",
    )


@pytest.mark.tcpnet_needs("netem", "cubic", "bbr")
@pytest.mark.parametrize("cc, loss", [("cubic", 0.01), ("cubic", 0.001), ("bbr", 0.01)])
def test_loss_curve(lab, cc, loss):
    """RFC 9438's CUBIC at 1% and 0.1% loss and BBR at 1%, 100 Mbit/s, 100 ms RTT, 20 s flows (iperf3)."""
    pair = lab.pair(link=Link(rate="100mbit", rtt="100ms", loss=loss))
    result = pair.iperf3(duration=20, cc=cc)
    record(f"{cc} at {loss:.1%} loss, 100 Mbit/s, 100 ms, 20 s", result.throughput_bps / 1e6, "Mbit/s")


@pytest.mark.tcpnet_needs("netem")
def test_pacing(lab):
    """fq's maxrate-free pacing is the sender's: a bbr flow's pacing rate against its delivery rate at 20 Mbit/s."""
    pair = lab.pair(link=Link(rate="20mbit", rtt="20ms"), server=Host(cc="bbr"))
    result = pair.transfer(duration=3.0, sndbuf=None)
    record(
        "bbr at 20 Mbit/s, 20 ms: goodput / payload rate",
        100 * result.throughput_bps / model.link_goodput(20e6),
        "%",
        f"srtt {result.sender_tcp_info.get('rtt', 0) / 1e3:.1f} ms",
    )


def test_starved_receiver(lab):
    """C10: a receiver starved of CPU against one that is not, unshaped, 5 MB each."""
    pair = lab.pair()
    normal = pair.transfer(5_000_000)
    starved = pair.transfer(5_000_000, starve_receiver=True)
    record(
        "C10: starved receiver / unstarved goodput",
        starved.throughput_bps / normal.throughput_bps,
        "x",
        f"{starved.throughput_bps / 1e6:.0f} vs {normal.throughput_bps / 1e6:.0f} Mbit/s on "
        f"{len(os.sched_getaffinity(0))} CPU(s)",
    )


def test_per_example_overhead(lab):
    """A hypothesis example's fixed cost: build a pair, a 10 kB transfer, tear it down (median of 20)."""
    times = []
    for _ in range(20):
        t0 = time.perf_counter()
        with Lab() as inner:
            inner.pair(link=Link(rate="100mbit")).transfer(10_000)
        times.append(time.perf_counter() - t0)
    record("per example: pair + 10 kB transfer + teardown, median of 20", statistics.median(times) * 1e3, "ms")


def test_process_costs():
    """What a guest's processes pay: a system call, a fork, first-touch page faults (Python allocating 100k dicts)."""

    def timed(function, repeat):
        t0 = time.perf_counter()
        for _ in range(repeat):
            function()
        return (time.perf_counter() - t0) / repeat

    def fork():
        pid = os.fork()
        if pid == 0:
            os._exit(0)
        os.waitpid(pid, 0)

    record("one system call (getppid)", timed(os.getppid, 5000) * 1e6, "us")
    record("fork + wait", timed(fork, 20) * 1e3, "ms")
    record(
        "allocate and free 100k small dicts",
        timed(lambda: [dict(a=i, b=str(i)) for i in range(100_000)], 5) * 1e3,
        "ms",
        f"PYTHONMALLOC={os.environ.get('PYTHONMALLOC', 'default')}",
    )
