"""A VM host's vCPUs kept from halting during a measurement (measure/awake.py): real spinners, gone after."""

import os
import time

import pytest

from pytest_tcpnet import guest
from pytest_tcpnet.errors import LabError
from pytest_tcpnet.measure.awake import awake_cpus, keep_awake
from pytest_tcpnet.measure.slots import measurement_slot


def test_each_cpu_gets_one_lowest_priority_spinner_for_the_block_only(monkeypatch):
    monkeypatch.setenv("TCPNET_AWAKE_CPUS", "on")
    with awake_cpus() as spinners:
        assert len(spinners) == len(os.sched_getaffinity(0)), spinners
        for spinner in spinners:
            assert spinner.poll() is None
            for _ in range(200):  # the child sets its policy once its interpreter starts
                if os.sched_getscheduler(spinner.pid) == os.SCHED_IDLE:
                    break
                time.sleep(0.01)
            assert os.sched_getscheduler(spinner.pid) == os.SCHED_IDLE
        assert sorted(next(iter(os.sched_getaffinity(s.pid))) for s in spinners) == sorted(os.sched_getaffinity(0))
    assert all(spinner.returncode is not None for spinner in spinners)
    assert not any(os.path.exists(f"/proc/{spinner.pid}") and _alive(spinner.pid) for spinner in spinners)


def _alive(pid):
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_off_starts_none_and_a_bad_mode_is_refused_before_anything_starts(monkeypatch):
    monkeypatch.setenv("TCPNET_AWAKE_CPUS", "off")
    with awake_cpus() as spinners:
        assert spinners == []
    monkeypatch.setenv("TCPNET_AWAKE_CPUS", "sometimes")
    with pytest.raises(LabError, match="TCPNET_AWAKE_CPUS: expected auto, on or off, got 'sometimes'"):
        with measurement_slot(5):
            pass


def test_auto_follows_the_cpu_s_hypervisor_flag(monkeypatch):
    monkeypatch.delenv("TCPNET_AWAKE_CPUS", raising=False)
    with open("/proc/cpuinfo", encoding="ascii", errors="replace") as f:
        flagged = any(line.startswith("flags") and " hypervisor" in line for line in f)
    assert keep_awake() == (flagged and not guest.inside_vm())
