"""KeepAwake (no root): one SCHED_IDLE spinner per usable CPU, pinned to it, gone after the block; and
CpuWatch leaves the spinners' CPU out of the machine's."""

from __future__ import annotations

import os
import subprocess

from testbed.emu.awake import KeepAwake
from testbed.poll import poll


class Run:
    def spawn(self, argv, **kw):
        return subprocess.Popen(argv, start_new_session=True, **kw)


def test_one_idle_class_spinner_per_cpu_and_none_left():
    with KeepAwake(Run()) as awake:
        cpus = sorted(os.sched_getaffinity(0))
        assert len(awake.pids) == len(cpus)
        poll(lambda: all(os.sched_getscheduler(p) == os.SCHED_IDLE for p in awake.pids), timeout=10,
             what="spinners in SCHED_IDLE")
        assert [sorted(os.sched_getaffinity(p)) for p in awake.pids] == [[c] for c in cpus]
        pids = awake.pids
    for p in pids:
        assert not os.path.exists(f"/proc/{p}") or open(f"/proc/{p}/stat").read().split()[2] == "Z"


def test_cpu_watch_leaves_the_spinners_out():
    from testbed.emu.health import CpuWatch

    with KeepAwake(Run()) as awake:
        poll(lambda: all(os.sched_getscheduler(p) == os.SCHED_IDLE for p in awake.pids), timeout=10,
             what="spinners in SCHED_IDLE")
        with CpuWatch([], exclude=awake.pids) as cpu:
            poll(lambda: len(cpu.machine) >= 3, timeout=10, interval=0.1, what="three CPU samples")
        with CpuWatch([]) as raw:
            poll(lambda: len(raw.machine) >= 3, timeout=10, interval=0.1, what="three CPU samples")
    assert min(raw.machine[1:]) > 80  # the spinners fill every CPU...
    assert cpu.summary()["machine_mean"] < raw.summary()["machine_mean"] - 40  # ...and are not counted
