"""Keep the CPUs from halting while the emulator times frames: one SCHED_IDLE busy loop per CPU.

Why: on a VM whose idle vCPUs halt -- this project's CI machine is a nested guest with
``guest_halt_poll_ns=0`` -- waking a halted vCPU goes through the host, which books the wait as steal
and delivers the wake-up late. The link nodes' frames came out late in step with that steal (docs/pfc.md
"Lateness"): the long-haul quick trial had 2-10 % of its link-node frames late at 1.5-9 % steal. A
SCHED_IDLE task never delays real work (the scheduler preempts it as soon as anything else can run), but
a CPU running one never halts. With it the same trial had no lateness in 4 of 5 runs (steal 0.7 %).

:func:`for_machine` is what scenarios, ``testbed validate`` and the benchmarks use: spinners on a VM
(the CPU's ``hypervisor`` flag), none on bare metal, where a halted core wakes in microseconds and
spinning would only burn power; ``TESTBED_KEEP_AWAKE=0`` or ``=1`` decides instead.

The loops die with the process that started them (``PR_SET_PDEATHSIG``), even after ``kill -9``; given a
run they are also its processes (killed at teardown, or by ``testbed clean``). Their CPU time is not the
emulator's: :class:`testbed.emu.health.CpuWatch` and :func:`testbed.emu.cpustat.sample` leave it out,
finding every spinner by the mark in its command line.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from testbed.emu.cpustat import MARK

SPIN = (f"# {MARK}\n"
        "import ctypes, os, signal, sys\n"
        "ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG: die with the starter\n"
        "if os.getppid() != int(sys.argv[2]):\n    sys.exit(0)  # the starter died before the line above\n"
        "os.sched_setaffinity(0, {int(sys.argv[1])})\n"
        "os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))\n"
        "while True:\n    pass\n")


class KeepAwake:
    """``with KeepAwake(run) as awake:`` -- a SCHED_IDLE spinner on every CPU this process may use
    (``run``: a :class:`testbed.emu.registry.RunRegistry` to record them in, or None)."""

    def __init__(self, run=None):
        self.run = run
        self.procs: list[subprocess.Popen] = []

    def __enter__(self) -> "KeepAwake":
        try:
            for cpu in sorted(os.sched_getaffinity(0)):
                argv = [sys.executable, "-c", SPIN, str(cpu), str(os.getpid())]
                kw = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
                self.procs.append(self.run.spawn(argv, **kw) if self.run is not None
                                  else subprocess.Popen(argv, start_new_session=True, **kw))
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


def wanted(environ=os.environ, cpuinfo: Path = Path("/proc/cpuinfo")) -> tuple[bool, str]:
    """Whether to keep the CPUs awake on this machine, and why (one line for the run's record)."""
    forced = environ.get("TESTBED_KEEP_AWAKE", "").strip()
    if forced in ("0", "1"):
        return forced == "1", f"TESTBED_KEEP_AWAKE={forced}"
    try:
        vm = any(line.startswith("flags") and " hypervisor" in line for line in cpuinfo.read_text().splitlines())
    except OSError:
        vm = False
    return (True, "a VM (CPU flag hypervisor): a halted vCPU wakes late") if vm else \
        (False, "not a VM: cores wake in microseconds")


class MachineAwake(KeepAwake):
    """:class:`KeepAwake` where :func:`wanted` says so, else nothing; ``on`` and ``why`` say which."""

    def __init__(self, run=None, environ=os.environ):
        super().__init__(run)
        self.on, self.why = wanted(environ)

    def __enter__(self) -> "MachineAwake":
        return super().__enter__() if self.on else self

    def record(self) -> dict:
        return {"on": self.on, "why": self.why, "spinners": len(self.procs)}


def for_machine(run=None, environ=os.environ) -> MachineAwake:
    """``with for_machine() as awake:`` -- spinners if this machine needs them (:func:`wanted`)."""
    return MachineAwake(run, environ)
