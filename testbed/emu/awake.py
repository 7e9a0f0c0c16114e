"""Keep the CPUs from halting while a timing trial runs: one SCHED_IDLE busy loop per CPU.

Why: on a VM whose idle vCPUs halt -- this project's CI machine is a nested guest with
``guest_halt_poll_ns=0`` -- waking a halted vCPU goes through the host, which books the wait as steal
and delivers the wake-up late. The link nodes' frames came out late in step with that steal (docs/pfc.md
"Lateness"): the long-haul quick trial had 2-10 % of its link-node frames late at 1.5-9 % steal. A
SCHED_IDLE task never delays real work (the scheduler preempts it as soon as anything else can run), but
a CPU running one never halts. With it the same trial had no lateness in 4 of 5 runs (steal 0.7 %).

The loops are the run's processes (killed at teardown, or by ``testbed clean`` after a crash). Their CPU
time is not the emulator's: :class:`testbed.emu.health.CpuWatch` leaves it out (``exclude``).
"""

from __future__ import annotations

import os
import subprocess
import sys

SPIN = ("import os, sys\n"
        "os.sched_setaffinity(0, {int(sys.argv[1])})\n"
        "os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))\n"
        "while True:\n    pass\n")


class KeepAwake:
    """``with KeepAwake(run) as awake:`` -- a SCHED_IDLE spinner on every CPU this process may use."""

    def __init__(self, run):
        self.run = run
        self.procs: list[subprocess.Popen] = []

    def __enter__(self) -> "KeepAwake":
        try:
            for cpu in sorted(os.sched_getaffinity(0)):
                self.procs.append(self.run.spawn([sys.executable, "-c", SPIN, str(cpu)],
                                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, *exc) -> None:
        for p in self.procs:
            p.kill()
        for p in self.procs:
            p.wait(timeout=10)
        self.procs = []

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self.procs]
