"""Expedited RCU during a teardown: set only inside the block, put back after, also after a crash."""

import json
import os

import pytest

from testbed.emu import rcu


def _alive_only_me(pid, start):
    return pid == os.getpid()


@pytest.fixture
def knob(tmp_path):
    path = tmp_path / "rcu_expedited"
    path.write_text("0\n")
    return path


def test_set_inside_the_block_and_restored_after(tmp_path, knob):
    with rcu.expedited(tmp_path / "state", _alive_only_me, None, knob=knob) as changed:
        assert changed
        assert knob.read_text() == "1"
        saved = json.loads((tmp_path / "state" / rcu.SAVED).read_text())
        assert saved["pid"] == os.getpid() and saved["value"] == "0"
    assert knob.read_text() == "0"
    assert not (tmp_path / "state" / rcu.SAVED).exists()


def test_restored_when_the_block_raises(tmp_path, knob):
    with pytest.raises(KeyboardInterrupt), rcu.expedited(tmp_path, _alive_only_me, None, knob=knob):
        raise KeyboardInterrupt
    assert knob.read_text() == "0"


def test_nested_blocks_leave_the_outer_one_in_charge(tmp_path, knob):
    with rcu.expedited(tmp_path, _alive_only_me, None, knob=knob) as outer:
        with rcu.expedited(tmp_path, _alive_only_me, None, knob=knob) as inner:
            assert (outer, inner) == (True, False)
        assert knob.read_text() == "1", "the inner block must not put the knob back under the outer one"
    assert knob.read_text() == "0"


def test_a_knob_already_expedited_is_left_alone(tmp_path, knob):
    knob.write_text("1\n")
    with rcu.expedited(tmp_path, _alive_only_me, None, knob=knob) as changed:
        assert not changed
    assert knob.read_text() == "1\n"
    assert not (tmp_path / rcu.SAVED).exists()


def test_no_knob_is_no_error(tmp_path):
    with rcu.expedited(tmp_path, _alive_only_me, None, knob=tmp_path / "absent" / "knob") as changed:
        assert not changed


def test_a_dead_teardown_is_undone_by_the_next(tmp_path, knob):
    """A teardown SIGKILLed inside the block left the knob at 1 and its saved value: the next one (or
    `testbed clean`) restores it, then expedites (and restores) for itself."""
    knob.write_text("1")
    (tmp_path / rcu.SAVED).write_text(json.dumps({"pid": 999_999_999, "start": 1.0, "value": "0"}))
    with rcu.expedited(tmp_path, _alive_only_me, None, knob=knob) as changed:
        assert changed and knob.read_text() == "1"
    assert knob.read_text() == "0"
    assert not (tmp_path / rcu.SAVED).exists()


def test_a_live_owner_keeps_its_setting(tmp_path, knob):
    knob.write_text("1")
    (tmp_path / rcu.SAVED).write_text(json.dumps({"pid": os.getpid(), "start": None, "value": "0"}))
    assert not rcu.restore_orphaned(tmp_path, _alive_only_me, knob=knob)
    assert knob.read_text() == "1"
