"""Keep the CPUs from halting while the emulator times frames: one SCHED_IDLE busy loop per CPU.

Why: on a VM whose idle vCPUs halt -- this project's CI machine is a nested guest with
``guest_halt_poll_ns=0`` -- waking a halted vCPU goes through the host, which books the wait as steal
and delivers the wake-up late. The link nodes' frames came out late in step with that steal (docs/pfc.md
"Lateness"): the long-haul quick trial had 2-10 % of its link-node frames late at 1.5-9 % steal. A
SCHED_IDLE task never delays real work (the scheduler preempts it as soon as anything else can run), but
a CPU running one never halts. With it the same trial had no lateness in 4 of 5 runs (steal 0.7 %).

:func:`for_machine` is what scenarios, ``testbed validate`` and the benchmarks use: spinners on a VM
(the CPU's ``hypervisor`` flag), none on bare metal, where a halted core wakes in microseconds and
spinning would only burn power, and none in a QEMU TCG guest (:func:`machine_kind`: there a vCPU is a
host thread, and spinning ones starve QEMU's own threads); ``TESTBED_KEEP_AWAKE=0`` or ``=1`` decides
instead.

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


#: CPUID leaf 0x40000000's vendor (EBX, ECX, EDX) under QEMU's TCG; KVM says "KVMKVMKVM\0\0\0".
TCG_VENDOR = "TCGTCGTCGTCG"


def hypervisor_vendor(cpuid: Path = Path("/dev/cpu/0/cpuid")) -> str | None:
    """CPUID 0x40000000's vendor string, where the ``cpuid`` device is readable (root, module loaded); else None."""
    try:
        fd = os.open(cpuid, os.O_RDONLY)
    except OSError:
        return None
    try:
        regs = os.pread(fd, 16, 0x40000000)
    except OSError:
        return None
    finally:
        os.close(fd)
    return regs[4:16].decode("ascii", "replace").rstrip("\0") if len(regs) == 16 else None


def machine_kind(cpuinfo: str, vendor: str | None = None) -> str:
    """``"tcg"`` (a QEMU TCG guest: its vCPUs are host threads running translated code), ``"vm"`` (a guest of
    a hardware hypervisor: the CPU's ``hypervisor`` flag) or ``"metal"`` (pure: ``/proc/cpuinfo``'s text and
    :func:`hypervisor_vendor`). TCG shows the ``hypervisor`` flag too; it is told apart by the CPUID vendor
    (``TCGTCGTCGTCG``) or, without the ``cpuid`` device, by the model name QEMU gives ``-cpu max`` under TCG
    ("QEMU TCG CPU version 2.5+"; under KVM ``-cpu max`` is the host's model)."""
    lines = cpuinfo.splitlines()
    model = next((ln.split(":", 1)[1].strip() for ln in lines if ln.startswith("model name")), "")
    if vendor == TCG_VENDOR or "QEMU TCG CPU" in model:
        return "tcg"
    return "vm" if any(ln.startswith("flags") and " hypervisor" in ln for ln in lines) else "metal"


def wanted(environ=os.environ, cpuinfo: Path = Path("/proc/cpuinfo"), vendor=hypervisor_vendor) -> tuple[bool, str]:
    """Whether to keep the CPUs awake on this machine, and why (one line for the run's record).

    Not in a TCG guest: there a halted vCPU is a host thread asleep on a condition variable (no hypervisor
    exit to wake it from), while a spinning one is a host thread at 100 %. Measured in the test VM
    (docs/vm.md "Keep-awake in the TCG guest"): with spinners QEMU took 1.46-1.86 host cores against
    0.93-1.40 without, the long haul's link nodes were as late (3.1/3.3 % against 3.0/2.7 % of frames),
    and a real-time probe in the guest overslept by more than 10 ms 259 times against 171.
    """
    forced = environ.get("TESTBED_KEEP_AWAKE", "").strip()
    if forced in ("0", "1"):
        return forced == "1", f"TESTBED_KEEP_AWAKE={forced}"
    try:
        kind = machine_kind(cpuinfo.read_text(), vendor())
    except OSError:
        kind = "metal"
    return {"vm": (True, "a VM (CPU flag hypervisor): a halted vCPU wakes late"),
            "tcg": (False, "a QEMU TCG guest: a spinning vCPU takes a host core from QEMU's own threads"),
            "metal": (False, "not a VM: cores wake in microseconds")}[kind]


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
