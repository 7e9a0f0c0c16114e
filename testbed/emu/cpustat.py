"""The machine's CPU accounting, read one way: busy and steal shares from ``/proc/stat``, with the
keep-awake spinners left out.

Why one module: the PFC trial's steal figure, the tests' "is the machine quiet?" wait and the health
watch each read ``/proc/stat`` on their own, and only one knew that a
:class:`testbed.emu.awake.KeepAwake` spinner's CPU is not load. Steal matters on a VM whose idle vCPUs
halt: the emulator's late frames track it (docs/pfc.md, "Lateness").
"""

from __future__ import annotations

import time
from pathlib import Path

MARK = "testbed-keep-awake"   # in every spinner's command line: how spinners are found from any process


def host_cpu_times() -> list[int]:
    """The machine's aggregate CPU times (``/proc/stat`` first line, clock ticks): user, nice, system, idle,
    iowait, irq, softirq, steal."""
    with open("/proc/stat") as f:
        return cpu_times_of(f.readline())


def cpu_times_of(stat: str) -> list[int] | None:
    """The aggregate ``cpu`` line of a ``/proc/stat`` text (this machine's or another's, e.g. a cluster
    worker's read over SSH) as :func:`host_cpu_times` gives it (missing trailing counters are 0), or None."""
    for line in stat.splitlines():
        words = line.split()
        if words and words[0] == "cpu":
            return [int(x) for x in (words[1:9] + ["0"] * 8)[:8]]
    return None


def steal_fraction(before: list[int], after: list[int]) -> float:
    """Share of the CPU time between two :func:`host_cpu_times` readings that the hypervisor gave to others."""
    delta = [b - a for a, b in zip(before, after, strict=True)]
    total = sum(delta)
    return delta[7] / total if total > 0 else 0.0


def busy_fraction(before: list[int], after: list[int], excluded_ticks: int = 0) -> float:
    """Share of the CPU time between two readings that was busy (everything but idle and iowait; steal
    counts as busy), less ``excluded_ticks`` of CPU that was not load (the spinners')."""
    delta = [b - a for a, b in zip(before, after, strict=True)]
    total = sum(delta)
    if total <= 0:
        return 0.0
    busy = total - delta[3] - delta[4] - excluded_ticks
    return min(1.0, max(0.0, busy / total))


def spinner_pids(proc: Path = Path("/proc")) -> list[int]:
    """Every keep-awake spinner running on the machine, whoever started it (found by :data:`MARK`)."""
    mark = MARK.encode()
    pids = []
    for d in proc.iterdir():
        if not d.name.isdigit():
            continue
        try:
            if mark in (d / "cmdline").read_bytes():
                pids.append(int(d.name))
        except OSError:   # gone, or not ours to read
            continue
    return sorted(pids)


def process_ticks(pids, proc: Path = Path("/proc")) -> int:
    """User plus system CPU ticks the processes ``pids`` used so far (vanished ones count 0)."""
    total = 0
    for pid in pids:
        try:
            fields = (proc / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])   # utime, stime (fields 14 and 15 of proc(5))
    return total


def sample(window_s: float = 1.0) -> dict:
    """``{"busy", "steal"}`` shares of all CPU time over ``window_s``, the spinners' CPU left out of busy."""
    spinners = spinner_pids()
    c0, s0 = host_cpu_times(), process_ticks(spinners)
    time.sleep(window_s)   # the measurement window itself, not a wait for something to happen
    c1, s1 = host_cpu_times(), process_ticks(spinners)
    return {"busy": busy_fraction(c0, c1, max(0, s1 - s0)), "steal": steal_fraction(c0, c1)}



#: The kernel's load-average time constants, seconds (1, 5 and 15 minutes: ``kernel/sched/loadavg.c``).
LOAD_PERIODS_S = (60.0, 300.0, 900.0)


def spinner_load(ages_s) -> tuple[float, float, float]:
    """What spinners that have been runnable for ``ages_s`` seconds add to the 1-, 5- and 15-minute load
    averages (pure): the kernel damps each average exponentially, so one always-runnable task adds
    ``1 - exp(-age / T)``, not one, until it has run for several ``T``."""
    import math

    return tuple(sum(1.0 - math.exp(-max(0.0, a) / t) for a in ages_s) for t in LOAD_PERIODS_S)


def process_ages_s(pids, proc: Path = Path("/proc")) -> list[float]:
    """Seconds each of ``pids`` has existed (``starttime``, field 22 of proc(5), against ``/proc/uptime``);
    vanished ones are left out."""
    import os

    tick = os.sysconf("SC_CLK_TCK")
    uptime = float((proc / "uptime").read_text().split()[0])
    ages = []
    for pid in pids:
        try:
            fields = (proc / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        ages.append(max(0.0, uptime - int(fields[19]) / tick))
    return ages


def load_average(proc: Path = Path("/proc"), raw: tuple[float, float, float] | None = None,
                 ) -> tuple[float, float, float]:
    """``os.getloadavg()`` (or ``raw``) without the keep-awake spinners: each is always runnable, so it
    adds to every average while it runs, by how long it has run (:func:`spinner_load`). Subtracting a
    whole one per spinner read ``[0, 0, 0]`` for a collective of a few seconds while ``uptime`` said
    0.7-3.5. A spinner that stopped shortly before still weighs in the averages; that is not removed."""
    import os

    loads = raw if raw is not None else os.getloadavg()
    less = spinner_load(process_ages_s(spinner_pids(proc), proc))
    return tuple(round(max(0.0, x - n), 2) for x, n in zip(loads, less, strict=True))
