"""How late the machine fires timers while a run goes: a tiny separate process that sleeps to absolute
deadlines every millisecond (every 10 in a QEMU TCG guest) and records how late each wake-up was (issue 14).

Why: tc netem, tbf, OVS and BMv2 time their work with the kernel's timers, and nothing in them says when
those timers fired late. The userspace link node measures its own lateness; a run without one (OVS or
BMv2 over plain veths, HTB, a netem long haul) had no lateness measure at all -- only "machine CPU >= 95 %
busy". In the QEMU TCG guest the whole machine stalls for 10-230 ms about once a second (docs/vm.md
"Stalls in the TCG guest"): netem's timers with it, yet its trials read valid. This probe is the missing
measure. :class:`testbed.emu.health.CpuWatch` starts it beside every trial it watches (every scenario
uses one), and :mod:`testbed.emu.runhealth` judges runs without a link node by its ``stalled_fraction``.

The probe is a process, not a thread, so the scenario's GIL does not make stalls of its own. It runs
SCHED_FIFO at :data:`RT_PRIORITY` when permitted (root): above the link cores (10) and every normal task,
it measures what a kernel timer could do, not how busy the CPUs were (a timer interrupt preempts every
task too). Without the permission it runs normal, with 1 us timer slack; the summary says which. It
costs ~3 % of one core on this project's KVM guest (the summary's ``cpu_fraction`` measures it every
run): ~25 us a wake-up, nearly all of it the kernel's (a ``clock_nanosleep`` whose deadline has passed
costs as much), so a probe in C would not be cheaper. :class:`testbed.emu.health.CpuWatch` leaves its CPU
out of the machine's busy share, like the keep-awake spinners'.

After a late wake-up the next deadline is the next one on the grid that is still ahead (missed ones are
skipped and accounted for by :func:`summarise`), so a stall yields one sample. Samples are whole microseconds (``uint32``) in an unlinked temporary
file the probe inherits, so nothing is left behind; the probe dies with its starter (``PR_SET_PDEATHSIG``,
also after ``kill -9``), and :class:`TimerProbe` stops it on every way out of its ``with``.
"""

from __future__ import annotations

import os
import signal
import struct
import subprocess
import sys
import tempfile
from array import array
from pathlib import Path

from testbed.emu.awake import hypervisor_vendor, machine_kind
from testbed.emu.cpustat import process_ticks

#: One wake-up per millisecond: the grain of netem/tbf/OVS timing worth measuring, at ~3 % of a core.
PERIOD_S = 1e-3
#: In a QEMU TCG guest a wake-up costs ~0.3 ms of a vCPU (measured in the test VM: 10 s of CPU over a
#: 37 s trial at 1 ms, 27 % of a vCPU): there the probe wakes every 10 ms (measured 6-10 % of a vCPU, an
#: upper bound: the guest accounts CPU by ticks, which a timer-woken task tends to meet). The deadlines
#: are a sample of "a timer due now" either way; a sparser one is only noisier (docs/vm.md).
TCG_PERIOD_S = 10e-3
#: SCHED_FIFO priority (root): above the link cores' 10 (testbed.links.delayline.DEFAULT_RT_PRIORITY).
RT_PRIORITY = 20
#: Lateness beyond which a deadline counts toward ``stalled_fraction``: the link node's own late
#: tolerance (a frame it sends more than 250 us after its release time is ``emulator_late``). So
#: ``stalled_fraction`` is the share of timers due at evenly spread times that fired later than a link
#: node allows its frames -- the late fraction a link node would have reported, had the machine's timers
#: been its only limit -- and is judged against the link node's ``MAX_LATE_FRACTION`` (runhealth).
#: It does not flag a busy host: on this project's 2-core KVM guest (docs/architecture.md "Timer
#: stalls") SCHED_FIFO wake-ups had a p99 of 67-76 us and a stalled_fraction of 0.013-0.064 %, idle or
#: beside 3 busy loops, far below 1 %.
TOLERANCE_S = 250e-6   # testbed.links.delayline.DEFAULT_LATE_TOLERANCE_S (not imported: emu -> links -> emu)
#: Wake-ups later than this are counted as stalls (``stalls``): the threshold of the probe that first
#: measured the TCG guest's stalls (docs/vm.md), so the figures compare.
STALL_S = 10e-3
#: Larger tolerances the summary also gives the stalled share for: a run dilated beyond the project's
#: scale 1000 allows its link nodes proportionally more (``testbed.links.node.late_tolerance_at``: 5 ms at
#: the TCG guest's 20000), and the probe does not know the run's scale.
ALSO_BEYOND_S = (1e-3, 5e-3)
MAGIC = b"TPR1"
#: Seconds a probe may take to start (a Python interpreter; slow in the TCG guest) before it is stopped.
START_S = 10.0

PROBE = ("# testbed-timer-probe\n"
         "import ctypes, os, signal, struct, sys, time\n"
         "from array import array\n"
         "libc = ctypes.CDLL(None, use_errno=True)\n"
         "libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG: die with the starter\n"
         "if os.getppid() != int(sys.argv[2]):\n    sys.exit(0)  # the starter died before the line above\n"
         "period, out, prio = int(sys.argv[1]), os.fdopen(int(sys.argv[3]), 'wb'), int(sys.argv[4])\n"
         "try:\n"
         "    os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(prio))\n"
         "except OSError:\n"
         "    prio = 0\n"
         "    libc.prctl(29, 1000, 0, 0, 0)  # PR_SET_TIMERSLACK: 1 us\n"
         "signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))\n"
         "class TS(ctypes.Structure):\n    _fields_ = [('s', ctypes.c_long), ('ns', ctypes.c_long)]\n"
         "ts, buf = TS(), array('I')\n"
         "out.write(struct.pack('<4sI', b'TPR1', prio)); out.flush()\n"
         "deadline = time.monotonic_ns() + period\n"
         "try:\n"
         "    while True:\n"
         "        ts.s, ts.ns = divmod(deadline, 1_000_000_000)\n"
         "        libc.clock_nanosleep(1, 1, ctypes.byref(ts), None)  # CLOCK_MONOTONIC, TIMER_ABSTIME\n"
         "        late = time.monotonic_ns() - deadline\n"
         "        if late < 0:\n            continue  # a signal woke it: sleep on to the same deadline\n"
         "        buf.append(min(late // 1000, 0xFFFFFFFF))\n"
         "        if len(buf) >= 4096:\n            buf.tofile(out); del buf[:]\n"
         "        deadline += period * (1 + late // period)  # the next deadline still ahead\n"
         "finally:\n"
         "    buf.tofile(out); out.flush()\n")


def summarise(lateness_us, period_s: float = PERIOD_S, *, policy: str, tolerance_s: float = TOLERANCE_S,
              stall_s: float = STALL_S, cpu_s: float | None = None) -> dict:
    """The probe's figures from its wake-ups' lateness (pure).

    ``stalled_fraction`` is the share of the run in which a timer could not fire within the tolerance: the
    share of the probe's deadlines, the skipped ones included, that fired later than ``tolerance_s``. A
    wake-up late by ``L`` stood for ``L // period`` skipped deadlines too, each of which would have fired
    then, ``period`` less late than the one before; ``ceil((L - tolerance) / period)`` of them were late
    beyond the tolerance. The deadlines are a regular sample of "a timer due now", so this is the late
    fraction of timers due at evenly spread times -- of frames a netem/tbf qdisc releases, say -- in the
    sense of the link node's late fraction. (A time-weighted figure, the lateness beyond the tolerance
    summed over the wall time, would miss a machine whose every timer is a little late: 0.5 ms late at a
    1 ms period read 25 %, where every timer, hence every frame, was late.)

    Args:
        lateness_us: each wake-up's lateness after its deadline, microseconds, in order.
        period_s: the probe's period (the samples alone then give the wall time they cover).
        policy: the scheduling policy the probe had ("SCHED_FIFO 20" or "SCHED_OTHER").
        tolerance_s: lateness a timer may have (:data:`TOLERANCE_S`).
        stall_s: lateness counted as a stall.
        cpu_s: the probe's own CPU seconds (None: not measured).

    Returns:
        ``{policy, period_us, wakeups, deadlines, wall_s, lateness_us: {p50, p99, max}, stalls, stall_ms,
        tolerance_us, stalled_fraction, stalled_fraction_beyond, cpu_s, cpu_fraction}``; ``stalled_fraction``
        None with no wake-up (nothing measured); ``stalled_fraction_beyond``: the same share beyond each of
        :data:`ALSO_BEYOND_S`.
    """
    xs = sorted(int(x) for x in lateness_us)
    period_us = max(1, round(period_s * 1e6))
    deadlines = sum(1 + x // period_us for x in xs)

    def late_share(tol_us: int) -> float | None:
        late = sum(-(-(x - tol_us) // period_us) for x in xs if x > tol_us)
        return round(late / deadlines, 5) if deadlines else None

    def pct(q):   # nearest rank
        return xs[min(len(xs) - 1, max(0, -(-len(xs) * q // 100) - 1))] if xs else None

    wall_s = deadlines * period_us / 1e6
    return {"policy": policy, "period_us": period_us, "wakeups": len(xs), "deadlines": deadlines,
            "wall_s": round(wall_s, 3), "lateness_us": {"p50": pct(50), "p99": pct(99), "max": xs[-1] if xs else None},
            "stalls": sum(1 for x in xs if x > stall_s * 1e6), "stall_ms": round(stall_s * 1e3, 3),
            "tolerance_us": round(tolerance_s * 1e6, 1), "stalled_fraction": late_share(round(tolerance_s * 1e6)),
            "stalled_fraction_beyond": {f"{t * 1e3:g}ms": late_share(round(t * 1e6)) for t in ALSO_BEYOND_S},
            "cpu_s": None if cpu_s is None else round(cpu_s, 3),
            "cpu_fraction": round(cpu_s / wall_s, 4) if cpu_s is not None and wall_s else None}


def parse(data: bytes) -> tuple[str | None, array]:
    """(policy, lateness samples) from the probe's file: the header says the SCHED_FIFO priority it got
    (0: it ran normal); None: the probe never started (no header)."""
    if len(data) < 8 or data[:4] != MAGIC:
        return None, array("I")
    prio = struct.unpack_from("<I", data, 4)[0]
    samples = array("I")
    body = data[8:]
    samples.frombytes(body[:len(body) - len(body) % samples.itemsize])
    return (f"SCHED_FIFO {prio}" if prio else "SCHED_OTHER"), samples


def machine_period(cpuinfo: Path = Path("/proc/cpuinfo"), vendor=hypervisor_vendor) -> float:
    """The probe's period on this machine: :data:`TCG_PERIOD_S` in a QEMU TCG guest
    (:func:`testbed.emu.awake.machine_kind`), else :data:`PERIOD_S`."""
    try:
        kind = machine_kind(cpuinfo.read_text(), vendor())
    except OSError:
        kind = "metal"
    return TCG_PERIOD_S if kind == "tcg" else PERIOD_S


class TimerProbe:
    """``with TimerProbe() as probe: ...`` then ``probe.summary`` (:func:`summarise`'s figures, or
    ``{"error": ...}`` when the probe could not run). ``pid``: the probe's process while it runs."""

    def __init__(self, period_s: float | None = None, rt_priority: int = RT_PRIORITY,
                 tolerance_s: float = TOLERANCE_S):
        """``period_s``: default :func:`machine_period`."""
        self.period_s = machine_period() if period_s is None else period_s
        self.rt_priority, self.tolerance_s = rt_priority, tolerance_s
        self.proc: subprocess.Popen | None = None
        self.summary: dict | None = None

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def __enter__(self) -> "TimerProbe":
        self._out = tempfile.TemporaryFile(prefix="testbed-timer-probe-")   # unlinked: never left behind
        self._err = tempfile.TemporaryFile(prefix="testbed-timer-probe-")
        fd = self._out.fileno()
        argv = [sys.executable, "-c", PROBE, str(round(self.period_s * 1e9)), str(os.getpid()), str(fd),
                str(self.rt_priority)]
        try:
            self.proc = subprocess.Popen(argv, pass_fds=(fd,), stdin=subprocess.DEVNULL,
                                         stdout=subprocess.DEVNULL, stderr=self._err, start_new_session=True)
        except BaseException:
            self._close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        try:
            cpu = self._stop()
            self._out.seek(0)
            policy, samples = parse(self._out.read())
            if policy is None:
                self._err.seek(0)
                tail = self._err.read().decode(errors="replace").strip().splitlines()[-1:]
                self.summary = {"error": "the timer probe did not start" + (f": {tail[0]}" if tail else "")}
            else:
                self.summary = summarise(samples, self.period_s, policy=policy, tolerance_s=self.tolerance_s,
                                         cpu_s=cpu)
        finally:
            self._close()

    def _stop(self) -> float | None:
        """Its CPU seconds (read while it still runs), then SIGTERM (it writes what it holds) or kill.
        A probe stopped right after it started is first given up to :data:`START_S` to write its header
        (its SIGTERM handler is in place by then): a short span then still has its samples."""
        from testbed.poll import poll

        p, cpu = self.proc, None
        if p is None:
            return None
        try:
            try:
                poll(lambda: p.poll() is not None or os.fstat(self._out.fileno()).st_size >= 8, timeout=START_S,
                     interval=0.01, what="the timer probe's start")
            except TimeoutError:
                pass
            if p.poll() is None:
                cpu = process_ticks([p.pid]) / os.sysconf("SC_CLK_TCK")
                p.send_signal(signal.SIGTERM)
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(timeout=5)
        finally:
            if p.poll() is None:     # interrupted while waiting: never leave it running
                p.kill()
                p.wait()
            self.proc = None
        return cpu

    def _close(self) -> None:
        for f in (self._out, self._err):
            f.close()

