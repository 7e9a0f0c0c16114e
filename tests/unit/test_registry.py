"""Run registry without root: records, the machine-wide lock, and removing only what was recorded."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from testbed.emu.registry import (
    LockBusyError,
    RunRegistry,
    clean_runs,
    load_runs,
    lock_wait_seconds,
    remove_objects,
    same_process,
)
from testbed.errors import EmulationError


@pytest.fixture
def state(tmp_path, monkeypatch):
    monkeypatch.setenv("TESTBED_STATE_DIR", str(tmp_path))
    monkeypatch.delenv("TESTBED_LOCK_WAIT", raising=False)
    return tmp_path


def test_record_written_before_and_removed_after(state):
    with RunRegistry("unit") as run:
        run.record_link("unit-nonexist0")
        doc = json.loads(run.path.read_text())
        assert doc["name"] == "unit" and doc["owner"]["pid"] == os.getpid()
        assert doc["objects"] == [{"kind": "link", "name": "unit-nonexist0", "netns": None}]
        path = run.path
    assert not path.exists()


def test_spawned_process_is_recorded_and_killed(state):
    with RunRegistry("unit") as run:
        proc = run.spawn([sys.executable, "-c", "import time; time.sleep(600)"])
        obj = run.objects[-1]
        assert obj["kind"] == "process" and obj["pid"] == proc.pid and obj["start"]
        assert same_process(proc.pid, obj["start"])
    assert proc.wait(timeout=5) is not None


def test_reused_pid_is_not_killed():
    victim = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        report = remove_objects([{"kind": "process", "pid": victim.pid, "start": 12345.0, "argv": []}])
        assert report["gone"] and not report["removed"]
        assert victim.poll() is None
    finally:
        victim.kill()
        victim.wait()


def test_lock_is_exclusive_and_names_the_owner(state):
    code = ("import sys; from testbed.emu import RunRegistry\n"
            "with RunRegistry('holder'):\n    print('held', flush=True); sys.stdin.read()\n")
    holder = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True, env=dict(os.environ))
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(LockBusyError, match=rf"another testbed run is active \(pid {holder.pid}, name holder\)"):
            RunRegistry("second").__enter__()
        with RunRegistry("probe", exclusive=False) as probe:  # probes need no lock
            assert probe.path.exists()
        runs = load_runs()
        assert [r["alive"] for r in runs if r["name"] == "holder"] == [True]
        assert clean_runs(only_dead=True)[0]["skipped"] is True
    finally:
        holder.communicate("", timeout=10)
    with RunRegistry("second"):
        pass


def test_lock_wait_env_is_validated():
    assert lock_wait_seconds({"TESTBED_LOCK_WAIT": "12.5"}) == 12.5
    assert lock_wait_seconds({}) == 0
    with pytest.raises(EmulationError, match="TESTBED_LOCK_WAIT"):
        lock_wait_seconds({"TESTBED_LOCK_WAIT": "soon"})


def test_clean_removes_dead_runs_processes_only(state):
    code = ("import os, sys, subprocess; from testbed.emu import RunRegistry\n"
            "run = RunRegistry('crashy').__enter__()\n"
            "p = run.spawn([sys.executable, '-c', 'import time; time.sleep(600)'], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\n"
            "print(p.pid, flush=True); os._exit(9)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=dict(os.environ))
    orphan = int(out.stdout.split()[0])
    bystander = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        dry = clean_runs(dry_run=True)
        assert len(dry) == 1 and dry[0]["removed"] and same_process(orphan, None)
        reports = clean_runs()
        assert reports[0]["name"] == "crashy" and not reports[0]["failed"]
        assert not same_process(orphan, None) or _zombie(orphan)
        assert bystander.poll() is None
        assert load_runs() == []
    finally:
        bystander.kill()
        bystander.wait()


def _zombie(pid: int) -> bool:
    try:
        return open(f"/proc/{pid}/stat").read().split(") ")[1][0] == "Z"
    except OSError:
        return True


def test_use_outside_with_block_is_an_error(state):
    with pytest.raises(EmulationError, match="outside"):
        RunRegistry("unit").record_link("x")


def test_name_only_links_are_kept_while_another_run_is_active():
    lo = {"kind": "link", "name": "lo", "netns": None}  # exists; dry runs never delete
    assert remove_objects([lo], dry_run=True, require_identity=True)["kept"]
    assert remove_objects([lo], dry_run=True)["removed"]
    assert remove_objects([dict(lo, ifindex=10**6)], dry_run=True)["gone"]  # a different interface now
    assert remove_objects([{"kind": "link", "name": "unit-absent0", "netns": None}],
                          require_identity=True)["gone"]


def test_timings_name_only_the_steps_that_ran():
    # `bench build` prints these stages; a step with nothing to remove must not appear as a stage
    timings: dict = {}
    lo = {"kind": "link", "name": "lo", "netns": None}
    assert remove_objects([lo], dry_run=True, timings=timings)["removed"]
    assert list(timings) == ["links"] and 0 <= timings["links"] < 5


def test_signals_during_teardown_are_deferred_then_raised():
    import signal

    from testbed.emu.signals import Terminated, deferred_signals, terminate_raises

    finished = []
    # Ctrl-C's default, as a terminal's job has it: a suite started in the background of a non-interactive
    # shell inherits SIGINT ignored, which deferred_signals rightly leaves alone (the CI of 3c61ce5 did)
    inherited = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt):
            with deferred_signals():
                os.kill(os.getpid(), signal.SIGINT)
                finished.append(True)
    finally:
        signal.signal(signal.SIGINT, inherited)
    assert finished == [True]
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(Terminated):
        with terminate_raises():
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(30)  # the handler's exception ends the sleep (a 10,000-bytecode loop could end first
            #                 under load: the unit suite failed here at load 5)
    assert signal.getsignal(signal.SIGTERM) == before


def test_waiters_get_the_lock_in_arrival_order(state):
    code = ("import sys; from testbed.emu import RunRegistry\n"
            "with RunRegistry(sys.argv[1], lock_wait=60):\n"
            "    print('got', sys.argv[1], flush=True); sys.stdin.readline()\n")
    procs = {}

    def start(name):
        procs[name] = subprocess.Popen([sys.executable, "-c", code, name], stdin=subprocess.PIPE,
                                       stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)

    def queued() -> int:
        q = state / "queue"
        return len(list(q.iterdir())) if q.exists() else 0

    from testbed.poll import poll

    try:
        start("first")
        assert procs["first"].stdout.readline().split() == ["got", "first"]
        start("second")
        poll(lambda: queued() == 1, timeout=30, what="second to queue")
        start("third")
        poll(lambda: queued() == 2, timeout=30, what="third to queue")
        order = []
        for name in ("first", "second", "third"):
            procs[name].stdin.write("\n")
            procs[name].stdin.flush()
            procs[name].wait(timeout=30)
            if name != "third":
                nxt = "second" if name == "first" else "third"
                order.append(procs[nxt].stdout.readline().split()[1])
        assert order == ["second", "third"]
    finally:
        for p in procs.values():
            p.kill()
            p.wait()


def test_nested_exclusive_run_in_one_process_is_a_clear_error(state):
    with RunRegistry("outer"):
        with pytest.raises(EmulationError, match="already holds the testbed lock"):
            RunRegistry("inner").__enter__()
        with RunRegistry("probe", exclusive=False):
            pass
    with RunRegistry("again"):
        pass
