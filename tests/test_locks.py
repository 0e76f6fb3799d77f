"""Lock files live in a private directory and are opened without following anything planted there."""

import fcntl
import os
import stat

import pytest

from pytest_tcpnet import locks
from pytest_tcpnet.errors import LabError
from slotholder import slot_held_elsewhere

try:  # the measurement code is moving from lab.py to measure/
    from pytest_tcpnet.measure import measurement_slot
except ImportError:
    from pytest_tcpnet.lab import measurement_slot


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
        with pytest.raises(LabError, match="no measurement slot free"):
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
