"""The owner record of a machine setting (testbed.emu.owned): read back only once its owner is gone, and
written whole."""

import json
import os

import pytest

from testbed.emu.owned import save_owned, saved_by_dead_owner

DEAD = 999_999_999


def _alive(pid, start):
    """This process is alive with any start time; pid 4242 only with start 7.0 (4242 at another start time
    is a reused pid); everything else is dead."""
    return pid == os.getpid() or (pid == 4242 and start == 7.0)


def test_a_dead_owner_hands_back_what_it_saved(tmp_path):
    path = tmp_path / "x.json"
    save_owned(path, {"value": "0", "threads": [{"pid": 5}]}, DEAD, 1.5)
    doc = saved_by_dead_owner(path, _alive)
    assert doc["value"] == "0" and doc["threads"] == [{"pid": 5}]
    assert (doc["pid"], doc["start"]) == (DEAD, 1.5) and doc["at"] > 0


def test_a_live_owner_keeps_its_record(tmp_path):
    path = tmp_path / "x.json"
    save_owned(path, {"value": "0"}, os.getpid(), None)
    assert saved_by_dead_owner(path, _alive) is None
    save_owned(path, {"value": "0"}, 4242, 7.0)
    assert saved_by_dead_owner(path, _alive) is None


def test_a_reused_pid_is_not_the_owner(tmp_path):
    path = tmp_path / "x.json"
    save_owned(path, {"value": "0"}, 4242, 3.0)     # pid 4242 now runs with start 7.0: another process
    assert saved_by_dead_owner(path, _alive)["value"] == "0"


@pytest.mark.parametrize("text", [None, "", "{not json", "[1, 2]", '"text"', '{"pid": "abc"}',
                                  '{"pid": null, "value": "0"}', '{"pid": [1]}'])
def test_no_record_or_a_garbled_one_is_nothing_to_put_back(tmp_path, text):
    path = tmp_path / "x.json"
    if text is not None:
        path.write_text(text)
    assert saved_by_dead_owner(path, lambda pid, start: False) is None


def test_a_record_without_a_pid_is_a_dead_owners(tmp_path):
    """What the modules did before the helper: a record missing its pid counts as owner pid 0 (dead)."""
    path = tmp_path / "x.json"
    path.write_text(json.dumps({"value": "0"}))
    assert saved_by_dead_owner(path, _alive) == {"value": "0"}


def test_written_whole_in_a_new_folder_and_replacing_the_old(tmp_path):
    path = tmp_path / "state" / "x.json"
    save_owned(path, {"value": "0"}, 1, 2.0)
    save_owned(path, {"value": "1"}, 3, 4.0)
    doc = json.loads(path.read_text())
    assert (doc["value"], doc["pid"], doc["start"]) == ("1", 3, 4.0)
    assert sorted(p.name for p in path.parent.iterdir()) == ["x.json"], "the temporary file stayed"


def test_the_owner_fields_win_over_the_document(tmp_path):
    path = tmp_path / "x.json"
    save_owned(path, {"pid": os.getpid(), "start": None, "value": "0"}, DEAD, 1.0)
    assert saved_by_dead_owner(path, _alive)["pid"] == DEAD
