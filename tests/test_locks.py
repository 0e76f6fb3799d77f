"""Lock files live in a private directory and are opened without following anything planted there."""

import fcntl
import os
import stat
import time

import pytest
from slotholder import slot_held_elsewhere

from pytest_tcpnet import locks
from pytest_tcpnet.errors import LabError
from pytest_tcpnet.measure import measurement_slot, slots
from pytest_tcpnet.measure.slots import slot_holders


@pytest.fixture
def lock_dir(tmp_path, monkeypatch):
    """A lock directory of this test's own (so nothing here contends with real sessions)."""
    path = tmp_path / "locks"
    monkeypatch.setenv(locks.LOCK_DIR_ENV, str(path))
    return path


def test_default_directory_is_private_and_ours():
    path = locks.lock_directory()
    info = os.lstat(path)
    assert stat.S_ISDIR(info.st_mode) and not stat.S_ISLNK(info.st_mode)
    assert info.st_uid == os.geteuid()
    assert stat.S_IMODE(info.st_mode) & 0o022 == 0
    if os.geteuid() == 0 and not locks.in_user_namespace():
        assert path.startswith("/run/")  # not a shared /tmp where other users can plant names
    else:
        assert str(locks.real_uid()) in path or path.startswith(os.environ.get("XDG_RUNTIME_DIR", "//"))


def test_lock_file_is_created_private_and_close_on_exec(lock_dir):
    fd = locks.open_lock_file("slot-0.lock")
    try:
        info = os.fstat(fd)
        assert stat.S_IMODE(info.st_mode) == 0o600 & ~_umask()
        assert info.st_uid == os.geteuid()
        assert fcntl.fcntl(fd, fcntl.F_GETFD) & fcntl.FD_CLOEXEC
        assert stat.S_IMODE(os.stat(lock_dir).st_mode) == 0o700 & ~_umask()
    finally:
        os.close(fd)


def test_symlinked_lock_file_is_refused_and_its_target_untouched(lock_dir, tmp_path):
    os.mkdir(lock_dir, 0o700)
    target = tmp_path / "victim"
    os.symlink(target, lock_dir / "slot-0.lock")
    with pytest.raises(LabError, match="symlink"):
        locks.open_lock_file("slot-0.lock")
    assert not target.exists()


def test_hard_linked_lock_file_is_refused(lock_dir, tmp_path):
    os.mkdir(lock_dir, 0o700)
    victim = tmp_path / "victim"
    victim.write_text("keep me")
    os.link(victim, lock_dir / "slot-0.lock")
    with pytest.raises(LabError, match="hard links"):
        locks.open_lock_file("slot-0.lock")
    assert victim.read_text() == "keep me"


def test_symlinked_directory_is_refused(lock_dir, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    os.symlink(elsewhere, lock_dir)
    with pytest.raises(LabError, match="not a symlink"):
        locks.open_lock_file("slot-0.lock")
    assert list(elsewhere.iterdir()) == []


def test_world_writable_directory_is_refused(lock_dir):
    os.mkdir(lock_dir)
    os.chmod(lock_dir, 0o777)
    with pytest.raises(LabError, match="writable by others"):
        locks.lock_directory()


@pytest.mark.skipif(os.geteuid() != 0 or locks.in_user_namespace(), reason="giving a file away needs real root")
def test_directory_of_another_user_is_refused(lock_dir):
    os.mkdir(lock_dir, 0o700)
    os.chown(lock_dir, 65534, 65534)  # what another user would have planted
    with pytest.raises(LabError, match="owned by uid 65534"):
        locks.open_lock_file("slot-0.lock")


@pytest.mark.parametrize("name", ["../x", "a/b", "..", ".", "", "x\0y", "x\ny", 3, "/etc/passwd"])
def test_lock_names_that_are_not_plain_file_names_are_refused(lock_dir, name):
    with pytest.raises(ValueError, match="lock name"):
        locks.open_lock_file(name)
    assert not lock_dir.exists() or list(lock_dir.iterdir()) == []


def test_measurement_slots_exclude_each_other_through_the_safe_lock_files(lock_dir, monkeypatch):
    monkeypatch.setenv("TCPNET_MEASUREMENT_SLOTS", "1")
    with slot_held_elsewhere():
        with pytest.raises(LabError, match=rf"no measurement slot free .*slot 0: pid {os.getpid()} \(.*python"):
            with measurement_slot(0.2):
                pass
        assert [p.name for p in lock_dir.iterdir()] == ["measurement-slot-0.lock"]
        assert stat.S_IMODE(os.stat(lock_dir / "measurement-slot-0.lock").st_mode) & 0o077 == 0
    with measurement_slot(5) as slot:  # free again once the holder left
        assert slot == 0


def _umask():
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_a_process_with_more_slots_takes_the_ones_default_processes_never_use(lock_dir, monkeypatch):
    """A child configured with 64 slots beside default sessions (1 slot here): it must not hold theirs."""
    monkeypatch.setenv("TCPNET_MEASUREMENT_SLOTS", "64")
    with measurement_slot(1) as many:
        assert many == 63
        monkeypatch.setenv("TCPNET_MEASUREMENT_SLOTS", "1")
        with measurement_slot(1) as default:
            assert default == 0


def _plant_holder(lock_dir, record):
    """Hold slot 0 through a descriptor whose record says `record` (as a forked or hung holder would)."""
    lock_dir.mkdir(exist_ok=True, mode=0o700)
    fd = locks.open_lock_file("measurement-slot-0.lock")
    fcntl.flock(fd, fcntl.LOCK_EX)
    os.pwrite(fd, record.encode(), 0)
    return fd


def test_a_holder_that_died_is_named_and_not_waited_for(lock_dir, monkeypatch):
    monkeypatch.setenv("TCPNET_MEASUREMENT_SLOTS", "1")
    fd = _plant_holder(lock_dir, "999999999 1 1.0 -\n")  # no such pid: its lock lives on in an inherited fd
    try:
        assert "which is dead" in slot_holders()[0]["why"]
        with pytest.warns(UserWarning, match="not waiting for pid 999999999, which is dead"):
            with measurement_slot(30) as slot:
                assert slot is None  # measured without a slot rather than queued behind nobody
    finally:
        os.close(fd)


def test_a_holder_past_its_own_deadline_is_not_waited_for(lock_dir, monkeypatch):
    import time

    from pytest_tcpnet.netlink.ownership import process_start_ticks

    monkeypatch.setenv("TCPNET_MEASUREMENT_SLOTS", "1")
    overdue = time.time() - 61  # its transfer's deadline passed more than OVERDUE_GRACE_S ago
    fd = _plant_holder(lock_dir, f"{os.getpid()} {process_start_ticks(os.getpid())} {overdue - 5} {overdue}\n")
    try:
        started = time.monotonic()
        with pytest.warns(UserWarning, match="past its own deadline: hung"):
            with measurement_slot(30):
                pass
        assert time.monotonic() - started < 5
    finally:
        os.close(fd)


class _GuestClock:
    """CLOCK_MONOTONIC of a guest that only sleeps move (what time travel gives), in nanoseconds."""

    def __init__(self, now_ns):
        self.now_ns = now_ns
        self.slept = []

    def clock_gettime_ns(self, clock):
        assert clock == time.CLOCK_MONOTONIC
        return self.now_ns

    def sleep(self, seconds):
        self.slept.append(seconds)
        self.now_ns += round(seconds * 1e9)


@pytest.mark.parametrize(
    ("now_ns", "lands_on"),
    [(5_234_567_891, 5_300_000_000), (5_299_999_999, 5_300_000_000), (5_300_000_000, 5_400_000_000)],
)
def test_a_time_travel_guest_starts_each_measurement_on_the_next_grid_point(lock_dir, monkeypatch, now_ns, lands_on):
    clock = _GuestClock(now_ns)
    monkeypatch.setattr(slots.time, "clock_gettime_ns", clock.clock_gettime_ns)
    monkeypatch.setattr(slots.time, "sleep", clock.sleep)
    monkeypatch.setattr(slots.guest, "time_travel", lambda: True)
    with measurement_slot(timeout=5):
        assert clock.now_ns == lands_on
    assert len(clock.slept) == 1 and clock.now_ns % round(slots.TIME_GRID_S * 1e9) == 0


def test_elsewhere_a_measurement_starts_at_once(lock_dir, monkeypatch):
    clock = _GuestClock(5_234_567_891)
    monkeypatch.setattr(slots.time, "clock_gettime_ns", clock.clock_gettime_ns)
    monkeypatch.setattr(slots.time, "sleep", clock.sleep)
    with measurement_slot(timeout=5):
        pass
    assert clock.slept == [] and not slots.guest.time_travel()
