"""ovs-vswitchd's send buffer after a SIGKILL (testbed.emu.ovssndbuf): the value before is saved with its owner
before the buffer is raised, and put back by the next run or ``testbed clean`` once the owner is gone, only
on the same ovs-vswitchd's same socket still at what was set. No root: ovs-vswitchd is a sleeping child
process (a real pid and start time), its send socket a fake."""

import json
import os
import socket
import subprocess
import sys

import pytest

from testbed.emu import ovssndbuf as S
from testbed.emu import registry
from testbed.emu.owned import save_owned
from testbed.emu.registry import same_process
from testbed.errors import EmulationError

BEFORE = S._wmem_default() or 212_992      # what a fresh ovs-vswitchd's send socket reads
INODE = 112509393
DEAD = 999_999_999


class SendSocket:
    """ovs-vswitchd's send socket as copies of it see it: Linux keeps twice the value set."""

    def __init__(self):
        self.sndbuf, self.inode = BEFORE, INODE
        self.refuse = False
        self.unreachable = False
        self.open_copies = 0

    def open(self, pid):
        if self.unreachable:
            raise EmulationError(f"pidfd_open(ovs-vswitchd pid {pid}): Operation not permitted")
        self.open_copies += 1
        return Copy(self), 200, self.inode


class Copy:
    def __init__(self, sock: SendSocket):
        self.sock = sock

    def getsockopt(self, level, opt):
        assert (level, opt) == (socket.SOL_SOCKET, socket.SO_SNDBUF)
        return self.sock.sndbuf

    def setsockopt(self, level, opt, value):
        assert (level, opt) == (socket.SOL_SOCKET, S.SO_SNDBUFFORCE)
        if self.sock.refuse:
            raise PermissionError(1, "Operation not permitted")
        self.sock.sndbuf = 2 * value

    def close(self):
        self.sock.open_copies -= 1

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


@pytest.fixture
def ovs():
    """A stand-in ovs-vswitchd: its pid is live until the test kills it (a restart)."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    yield proc
    proc.kill()
    proc.wait()


@pytest.fixture
def sock(monkeypatch):
    s = SendSocket()
    monkeypatch.setattr(S, "_open", s.open)
    return s


def _me_dead(pid, start):
    """As if this process (the run that raised the buffer) had been SIGKILLed; others as they are."""
    return pid != os.getpid() and same_process(pid, start)


def _orphan(state, ovs_pid, raised=4 << 20, **over):
    """The record a run killed inside the block leaves."""
    doc = {"ovs_pid": ovs_pid, "ovs_start": registry.process_start(ovs_pid), "inode": INODE, "before": BEFORE,
           "raised": raised, **over}
    save_owned(state / S.SAVED, doc, DEAD, 1.0)


def test_saved_with_its_owner_while_raised_and_gone_after(tmp_path, ovs, sock):
    with S.Raised(4 << 20, pid=ovs.pid, state=tmp_path) as lever:
        assert sock.sndbuf == 4 << 20
        doc = json.loads((tmp_path / S.SAVED).read_text())
        assert (doc["pid"], doc["start"]) == (os.getpid(), registry.process_start(os.getpid()))
        assert (doc["ovs_pid"], doc["inode"], doc["before"], doc["raised"]) == (ovs.pid, INODE, BEFORE, 4 << 20)
    assert sock.sndbuf == BEFORE and lever.record["restored"] is True
    assert not (tmp_path / S.SAVED).exists()
    assert sock.open_copies == 0


def test_a_killed_run_is_put_back_once_its_owner_is_gone(tmp_path, ovs, sock):
    S.Raised(4 << 20, pid=ovs.pid, state=tmp_path).__enter__()   # never left: SIGKILL
    assert not S.restore_orphaned(tmp_path, same_process), "its owner (this process) still runs"
    assert sock.sndbuf == 4 << 20
    assert S.restore_orphaned(tmp_path, _me_dead)
    assert sock.sndbuf == BEFORE and not (tmp_path / S.SAVED).exists()


def test_the_next_run_puts_it_back_before_raising_it(tmp_path, ovs, sock):
    sock.sndbuf = 4 << 20
    _orphan(tmp_path, ovs.pid)
    with S.Raised(2 << 20, pid=ovs.pid, state=tmp_path) as lever:
        assert lever.record["before"] == BEFORE, "the leftover was taken for the value before"
        assert "note" not in lever.record
        assert json.loads((tmp_path / S.SAVED).read_text())["pid"] == os.getpid()
    assert sock.sndbuf == BEFORE and not (tmp_path / S.SAVED).exists()


def test_testbed_clean_puts_it_back(tmp_path, ovs, sock, monkeypatch):
    monkeypatch.setenv(registry.STATE_DIR_ENV, str(tmp_path))
    sock.sndbuf = 4 << 20
    _orphan(tmp_path, ovs.pid)
    registry.clean()
    assert sock.sndbuf == BEFORE and not (tmp_path / S.SAVED).exists()


def test_a_second_owner_is_refused_while_the_first_lives(tmp_path, ovs, sock):
    with S.Raised(4 << 20, pid=ovs.pid, state=tmp_path):
        with pytest.raises(EmulationError, match=f"held raised by a live process \\(pid {os.getpid()}\\)"):
            S.Raised(2 << 20, pid=ovs.pid, state=tmp_path).__enter__()
        assert sock.sndbuf == 4 << 20
    assert sock.sndbuf == BEFORE


@pytest.mark.parametrize("why", ["ovs restarted", "another socket", "changed since", "never raised"])
def test_what_is_not_ours_any_more_is_left_alone_and_the_record_dropped(tmp_path, ovs, sock, why):
    sock.sndbuf = 4 << 20
    if why == "ovs restarted":
        _orphan(tmp_path, ovs.pid)
        ovs.kill()
        ovs.wait()
    elif why == "another socket":
        _orphan(tmp_path, ovs.pid, inode=INODE + 1)
    elif why == "changed since":
        _orphan(tmp_path, ovs.pid, raised=8 << 20)
    else:       # killed between saving and setting: the buffer still reads the value before
        sock.sndbuf = BEFORE
        _orphan(tmp_path, ovs.pid)
    left = sock.sndbuf
    assert not S.restore_orphaned(tmp_path, same_process)
    assert sock.sndbuf == left and not (tmp_path / S.SAVED).exists()
    assert sock.open_copies == 0


@pytest.mark.parametrize("how", ["unreachable", "refuse"])
def test_kept_for_a_later_try_when_it_cannot_be_set_now(tmp_path, ovs, sock, how):
    sock.sndbuf = 4 << 20
    _orphan(tmp_path, ovs.pid)
    setattr(sock, how, True)
    assert not S.restore_orphaned(tmp_path, same_process)
    assert sock.sndbuf == 4 << 20 and (tmp_path / S.SAVED).exists()
    setattr(sock, how, False)
    assert S.restore_orphaned(tmp_path, same_process)
    assert sock.sndbuf == BEFORE and not (tmp_path / S.SAVED).exists()


def test_a_failed_restore_keeps_the_record_for_after_this_process(tmp_path, ovs, sock):
    with S.Raised(4 << 20, pid=ovs.pid, state=tmp_path) as lever:
        sock.refuse = True
    assert lever.record["restored"] is False and sock.sndbuf == 4 << 20
    assert (tmp_path / S.SAVED).exists()
    sock.refuse = False
    assert S.restore_orphaned(tmp_path, _me_dead)
    assert sock.sndbuf == BEFORE


def test_a_restart_during_the_run_drops_the_record(tmp_path, ovs, sock):
    with S.Raised(4 << 20, pid=ovs.pid, state=tmp_path) as lever:
        ovs.kill()
        ovs.wait()
    assert lever.record["restored"] is None and not (tmp_path / S.SAVED).exists()


def test_no_record_when_nothing_was_raised(tmp_path, ovs, sock):
    sock.unreachable = True
    with pytest.raises(EmulationError, match="pidfd_open"):
        S.Raised(4 << 20, pid=ovs.pid, state=tmp_path).__enter__()
    assert not (tmp_path / S.SAVED).exists()


def test_a_state_folder_that_cannot_be_written_changes_nothing(tmp_path, ovs, sock):
    state = tmp_path / "file"
    state.write_text("not a folder")
    with pytest.raises(EmulationError, match="cannot save the value to put back"):
        S.Raised(4 << 20, pid=ovs.pid, state=state).__enter__()
    assert sock.sndbuf == BEFORE and sock.open_copies == 0
