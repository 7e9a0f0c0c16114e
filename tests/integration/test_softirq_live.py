"""The kernel's softirq threads run above the link cores while a run has one, and only then (testbed/emu/softirq.py).

Why it matters: a SCHED_FIFO link core that spins keeps a normal-policy ``ksoftirqd/N`` off its CPU until the
kernel's fair server stops the core for 50 ms (docs/links.md, "Where the gap tail at 200 Mbit/s came from").
Checked here against the real threads: raised to SCHED_FIFO above the core while it runs, put back when the
run ends, and put back by ``testbed clean`` after a run was SIGKILLed with its link core up.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from testbed.emu import softirq
from testbed.emu.registry import RunRegistry, state_dir
from testbed.links.delayline import DEFAULT_RT_PRIORITY
from testbed.links.model import LinkParams
from testbed.links.wire import open_wire
from testbed.poll import poll

pytestmark = [pytest.mark.root]


def _policies() -> dict[int, tuple[int, int]]:
    return {pid: (os.sched_getscheduler(pid), os.sched_getparam(pid).sched_priority)
            for pid, _start in softirq.SYSTEM.threads()}


@pytest.fixture
def normal_threads():
    """The test needs ksoftirqd threads at a normal policy to start from (a machine tuned otherwise is left
    alone by design, and this test has nothing to check there)."""
    before = _policies()
    assert before, "no ksoftirqd threads found in /proc"
    if any(policy in (os.SCHED_FIFO, os.SCHED_RR) for policy, _ in before.values()):
        pytest.skip(f"ksoftirqd already real-time on this machine ({before}): tuned by someone, left alone")
    yield before
    assert _policies() == before, "the test left ksoftirqd changed"


def test_raised_above_the_link_core_while_it_runs_then_put_back(tmp_path, normal_threads):
    with RunRegistry("softirq-live", exclusive=False) as run:
        w = open_wire(run, tmp_path, tag="q", core="c")
        assert _policies() == normal_threads, "nothing real-time runs yet: nothing to raise"
        w.start(LinkParams(rate_bps=10e6, delay_s=0.001))
        assert run.softirq_raised == len(normal_threads)
        during = _policies()
        assert all(p == (os.SCHED_FIFO, DEFAULT_RT_PRIORITY + 1) for p in during.values()), during
        core_policy = os.sched_getscheduler(w.proc.pid)
        assert core_policy == os.SCHED_FIFO and os.sched_getparam(w.proc.pid).sched_priority == DEFAULT_RT_PRIORITY
        w.stop()
    assert not (state_dir() / softirq.SAVED).exists()


CHILD = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from testbed.emu.registry import RunRegistry
    from testbed.links.model import LinkParams
    from testbed.links.wire import open_wire
    run = RunRegistry("softirq-killed", exclusive=False).__enter__()
    w = open_wire(run, Path(sys.argv[1]), tag="k", core="c")
    w.start(LinkParams(rate_bps=10e6, delay_s=0.001))
    print("up", flush=True)
    time.sleep(600)
""")


def test_a_killed_run_is_put_back_by_testbed_clean(tmp_path, normal_threads):
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(tmp_path)], stdout=subprocess.PIPE, text=True,
                             cwd=str(Path(__file__).resolve().parents[2]))
    try:
        assert child.stdout.readline().strip() == "up"
        assert all(p[0] == os.SCHED_FIFO for p in _policies().values())
        saved = json.loads((state_dir() / softirq.SAVED).read_text())
        assert saved["pid"] == child.pid
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    assert all(p[0] == os.SCHED_FIFO for p in _policies().values()), "SIGKILL leaves them raised"
    res = subprocess.run([sys.executable, "-m", "testbed.cli", "clean"], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr
    poll(lambda: _policies() == normal_threads, timeout=10, what="ksoftirqd put back")
    assert not (state_dir() / softirq.SAVED).exists()
