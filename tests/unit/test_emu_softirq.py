"""The softirq threads raised above the link cores only while a run needs it, put back after, also after a
crash (testbed.emu.softirq), and a run registry does it for a real-time process only."""

import json
import os
import sys

import pytest

from testbed.emu import registry, softirq
from testbed.emu.registry import RunRegistry


class FakeThreads:
    """Two ksoftirqd threads at SCHED_OTHER 0, one already SCHED_FIFO 50 (someone's tuning)."""

    def __init__(self):
        self.policy = {101: (os.SCHED_OTHER, 0), 102: (os.SCHED_OTHER, 0), 103: (os.SCHED_FIFO, 50)}
        self.refuse: set[int] = set()

    def sched(self) -> softirq.Sched:
        def set_(pid, policy, prio):
            if pid in self.refuse:
                raise PermissionError(1, "Operation not permitted")
            self.policy[pid] = (policy, prio)

        return softirq.Sched(lambda: [(pid, 5.0) for pid in sorted(self.policy)], lambda pid: self.policy[pid], set_)


def _alive_only_me(pid, start):
    return pid == os.getpid() or pid in (101, 102, 103)


def test_raised_inside_the_block_and_put_back_after(tmp_path):
    t = FakeThreads()
    with softirq.ahead(tmp_path, _alive_only_me, None, 11, t.sched()) as raised:
        assert raised == 2
        assert t.policy[101] == (os.SCHED_FIFO, 11) and t.policy[102] == (os.SCHED_FIFO, 11)
        assert t.policy[103] == (os.SCHED_FIFO, 50), "a thread already real-time is someone's tuning"
        saved = json.loads((tmp_path / softirq.SAVED).read_text())
        assert saved["pid"] == os.getpid()
        assert {t["pid"]: (t["policy"], t["priority"]) for t in saved["threads"]} == {
            101: (os.SCHED_OTHER, 0), 102: (os.SCHED_OTHER, 0)}
    assert t.policy == {101: (os.SCHED_OTHER, 0), 102: (os.SCHED_OTHER, 0), 103: (os.SCHED_FIFO, 50)}
    assert not (tmp_path / softirq.SAVED).exists()


def test_put_back_when_the_block_raises(tmp_path):
    t = FakeThreads()
    with pytest.raises(KeyboardInterrupt), softirq.ahead(tmp_path, _alive_only_me, None, 11, t.sched()):
        raise KeyboardInterrupt
    assert t.policy[101] == (os.SCHED_OTHER, 0)
    assert not (tmp_path / softirq.SAVED).exists()


def test_a_second_owner_changes_nothing_and_leaves_the_first_in_charge(tmp_path):
    t = FakeThreads()
    with softirq.ahead(tmp_path, _alive_only_me, None, 11, t.sched()) as outer:
        with softirq.ahead(tmp_path, _alive_only_me, None, 30, t.sched()) as inner:
            assert (outer, inner) == (2, 0)
            assert t.policy[101] == (os.SCHED_FIFO, 11)
        assert t.policy[101] == (os.SCHED_FIFO, 11), "the inner block must not put them back under the outer"
    assert t.policy[101] == (os.SCHED_OTHER, 0)


def test_no_permission_is_no_error(tmp_path):
    t = FakeThreads()
    t.refuse = {101, 102}
    with softirq.ahead(tmp_path, _alive_only_me, None, 11, t.sched()) as raised:
        assert raised == 0
    assert t.policy[101] == (os.SCHED_OTHER, 0)


def test_a_bad_priority_is_refused(tmp_path):
    with pytest.raises(ValueError, match="1-99"), softirq.ahead(tmp_path, _alive_only_me, None, 100,
                                                                FakeThreads().sched()):
        pass


def test_a_dead_owner_is_undone_by_the_next_run(tmp_path):
    """A run SIGKILLed inside the block left the threads at SCHED_FIFO and their saved settings: the next
    run (or `testbed clean`) puts them back, then raises (and restores) them for itself."""
    t = FakeThreads()
    t.policy[101] = t.policy[102] = (os.SCHED_FIFO, 11)
    (tmp_path / softirq.SAVED).write_text(json.dumps({"pid": 999_999_999, "start": 1.0, "threads": [
        {"pid": 101, "start": 5.0, "policy": os.SCHED_OTHER, "priority": 0},
        {"pid": 102, "start": 5.0, "policy": os.SCHED_OTHER, "priority": 0}]}))
    assert softirq.restore_orphaned(tmp_path, _alive_only_me, t.sched())
    assert t.policy[101] == (os.SCHED_OTHER, 0) and t.policy[102] == (os.SCHED_OTHER, 0)
    assert not (tmp_path / softirq.SAVED).exists()


def test_a_live_owner_keeps_its_setting(tmp_path):
    t = FakeThreads()
    t.policy[101] = (os.SCHED_FIFO, 11)
    (tmp_path / softirq.SAVED).write_text(json.dumps({"pid": os.getpid(), "start": None, "threads": [
        {"pid": 101, "start": 5.0, "policy": os.SCHED_OTHER, "priority": 0}]}))
    assert not softirq.restore_orphaned(tmp_path, _alive_only_me, t.sched())
    assert t.policy[101] == (os.SCHED_FIFO, 11)


def test_a_thread_gone_since_is_not_touched(tmp_path):
    """A saved pid that now names another process (a CPU went offline, the pid was reused) is left alone."""
    t = FakeThreads()
    t.policy[101] = (os.SCHED_FIFO, 11)
    (tmp_path / softirq.SAVED).write_text(json.dumps({"pid": 999_999_999, "start": 1.0, "threads": [
        {"pid": 101, "start": 5.0, "policy": os.SCHED_OTHER, "priority": 0}]}))
    assert softirq.restore_orphaned(tmp_path, lambda pid, start: pid == os.getpid(), t.sched())
    assert t.policy[101] == (os.SCHED_FIFO, 11)


def test_a_registry_raises_them_for_a_realtime_process_only_and_until_cleanup(tmp_path, monkeypatch):
    t = FakeThreads()
    monkeypatch.setattr(softirq, "SYSTEM", t.sched())
    monkeypatch.setattr(registry, "same_process", _alive_only_me)  # the fake threads' pids
    with RunRegistry("softirq-test", exclusive=False, root=tmp_path) as run:
        proc = run.spawn([sys.executable, "-c", "pass"])
        proc.wait()
        assert t.policy[101] == (os.SCHED_OTHER, 0), "a normal process needs nothing raised"
        proc = run.spawn([sys.executable, "-c", "pass"], realtime=10)
        proc.wait()
        assert t.policy[101] == (os.SCHED_FIFO, 11) and t.policy[102] == (os.SCHED_FIFO, 11)
        run.spawn([sys.executable, "-c", "pass"], realtime=10).wait()
        assert json.loads((tmp_path / softirq.SAVED).read_text())["pid"] == os.getpid()
    assert t.policy[101] == (os.SCHED_OTHER, 0) and t.policy[102] == (os.SCHED_OTHER, 0)
    assert not (tmp_path / softirq.SAVED).exists()
