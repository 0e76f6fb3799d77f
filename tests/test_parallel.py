"""pytest -n 2 over many lab-building tests: unique names, no collision, every test passes."""

import os
import sys
import textwrap

import pytest

pytestmark = pytest.mark.tcpnet_needs("privilege")

PROJECT = textwrap.dedent("""
    import os
    import pytest
    from pytest_tcpnet import Host, Link

    @pytest.mark.parametrize("i", range(24))
    def test_lab(tcpnet, i):
        pairs = [tcpnet.pair(link=Link(rate=f"{20 + i}mbit"),
                             client=Host(sysctls={"net.ipv4.tcp_rmem": f"4096 {65536 + i} 6291456"}))
                 for _ in range(2)]
        for pair in pairs:
            assert pair.client.sysctls()["net.ipv4.tcp_rmem"] == f"4096 {65536 + i} 6291456"
        result = pairs[i % 2].transfer(nbytes=100_000)
        assert result.nbytes == 100_000
        with open(os.environ["TCPNET_NAMES"], "a") as f:
            f.write("\\n".join(n.namespace for p in pairs for n in p.nodes) + "\\n")
""")


def test_xdist_two_workers_build_48_pairs_without_collision(children, tmp_path):
    pytest.importorskip("xdist")
    (tmp_path / "test_many.py").write_text(PROJECT)
    names = tmp_path / "names.txt"
    out = children.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-n", "2", "-q", "test_many.py"],
        cwd=tmp_path,
        env=dict(os.environ, TCPNET_NAMES=str(names)),
        timeout=300,
    )
    assert out.returncode == 0, out.stdout[-3000:]
    assert "24 passed" in out.stdout
    created = names.read_text().split()
    assert len(created) == 24 * 2 * 3 == len(set(created))
    assert len({name.split("-")[1] for name in created}) == 2  # two workers, two owner tags
