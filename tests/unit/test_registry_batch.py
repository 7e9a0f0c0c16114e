"""Teardown that scales: every recorded process is signalled in one pass with the signal that ends it
(SIGHUP for a Mininet shell, which ignores SIGTERM like any interactive bash), bridges go in batched
ovsdb transactions."""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest

from testbed.emu.ops import del_br_argv
from testbed.emu.registry import polite_signal, process_start, remove_objects
from testbed.errors import EmulationError

# Ignores SIGTERM (as an interactive bash does); on SIGHUP notes it in the file argv[1] names, then exits.
IGNORES_TERM = """
import signal, sys
signal.signal(signal.SIGTERM, signal.SIG_IGN)
def hup(signum, frame):
    open(sys.argv[1], "a").write("hup\\n")
    sys.exit(0)
signal.signal(signal.SIGHUP, hup)
print("ready", flush=True)
while True:
    signal.pause()
"""


def _children(n, note):
    procs = [subprocess.Popen([sys.executable, "-c", IGNORES_TERM, str(note)], stdout=subprocess.PIPE, text=True,
                              start_new_session=True) for _ in range(n)]
    for p in procs:
        assert p.stdout.readline().strip() == "ready"
    return procs


def test_mininet_shells_get_sighup_all_at_once(tmp_path):
    note = tmp_path / "hups"
    procs = _children(12, note)
    objects = [{"kind": "process", "pid": p.pid, "start": process_start(p.pid), "argv": [f"mininet:h{i}"]}
               for i, p in enumerate(procs)]
    report = remove_objects(objects)
    assert len(report["removed"]) == 12 and not report["failed"]
    # Ended by the hang-up (each noted it), not by a SIGKILL after waiting out an ignored SIGTERM.
    assert note.read_text().split() == ["hup"] * 12


def test_processes_ignoring_sigterm_are_killed_after_one_shared_grace(tmp_path):
    note = tmp_path / "hups"
    procs = _children(3, note)
    objects = [{"kind": "process", "pid": p.pid, "start": process_start(p.pid), "argv": ["worker"]} for p in procs]
    report = remove_objects(objects)
    assert len(report["removed"]) == 3 and not report["failed"]
    assert not note.exists()  # not Mininet shells: SIGTERM (ignored), then SIGKILL; never SIGHUP
    assert all(p.poll() is not None or not process_start(p.pid) for p in procs)


def test_polite_signal_and_batched_bridge_deletion():
    assert polite_signal({"argv": ["mininet:h1"]}) == signal.SIGHUP
    assert polite_signal({"argv": ["simple_switch_fast"]}) == signal.SIGTERM
    argv = del_br_argv(["s1", "s2", "s3"])
    assert argv[0] == "ovs-vsctl" and argv.count("del-br") == 3 and argv.count("--if-exists") == 3
    assert argv[argv.index("del-br") + 1] == "s1"


def test_a_failing_step_does_not_stop_the_next_ones(monkeypatch):
    """ovsdb too slow to answer must not leave the links and namespaces behind (nor raise out of teardown)."""
    from testbed.emu import registry
    from testbed.errors import EmulationError

    def slow_ovsdb(*args):
        raise EmulationError("ovsdb did not answer within 60 s")

    later = []
    monkeypatch.setattr(registry, "_remove_bridges", slow_ovsdb)
    monkeypatch.setattr(registry, "_remove_links", lambda objs, dry, req, rep: later.append("links"))
    monkeypatch.setattr(registry, "_remove_each", lambda objs, dry, rep: later.append("netns"))
    objects = [{"kind": "bridge", "name": "s1"}, {"kind": "link", "name": "s1-eth1", "netns": None},
               {"kind": "netns", "name": "p4t-h1"}]
    report = remove_objects(objects)
    assert later == ["links", "netns"]
    assert report["failed"] == ["bridge s1: ovsdb did not answer within 60 s"]


def test_link_batches_tag_a_group_of_this_process_and_delete_it_at_once():
    from testbed.emu import ops

    group = ops.teardown_group(4194303)
    assert group != 0 and group == ops.LINK_GROUP_BASE + 4194303 < 2**32
    assert ops.teardown_group(1) != ops.teardown_group(2)
    assert ops.group_batch(["s1-eth1", "s2-eth1"], group) == (f"link set dev s1-eth1 group {group}\n"
                                                               f"link set dev s2-eth1 group {group}\n")
    assert ops.del_group_argv(group) == ["ip", "link", "del", "group", str(group)]
    with pytest.raises(EmulationError):
        ops.group_batch(["bad name\nlink del dev eth0"], group)  # nothing but an interface name reaches ip
