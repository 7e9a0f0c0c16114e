"""The kernel's softirq threads kept ahead of our SCHED_FIFO link cores while they run, put back after.

Why: a link core (compiled or Python) runs SCHED_FIFO and busy-waits the last ~50 us before each release,
so on a backlogged fast link (200 Mbit/s: a frame every 60 us) it never leaves its CPU. When the kernel
defers softirq work to ``ksoftirqd/N`` (a normal task, bound to that CPU), the thread cannot run until the
kernel's fair server (6.12+: 50 ms of every second for starved normal tasks) stops the core for a whole
50 ms. Measured on the 2-core machine (2026-12-04, 3 s backlog at 200 Mbit/s): ksoftirqd waited 1.42 s to
run 0.8 ms, the core stalled 44-48 ms once a second, gap p99 error 98 %; with ksoftirqd at SCHED_FIFO one
priority above the core: max lateness 0.58 ms, gap p99 error 22.7 %. PREEMPT_RT systems run their softirq
threads at real-time priority for the same reason.

Each thread's policy and priority are saved first (``<state>/softirq_threads.json``, with the pid and start
time of the process that changed them: :mod:`testbed.emu.owned`), so a run killed halfway is undone by the next run or ``testbed
clean``. Threads already at a real-time policy (someone's tuning) are left alone. Within one machine one
owner at a time: a second, concurrent owner finds the threads raised and changes nothing.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from testbed.emu.owned import save_owned, saved_by_dead_owner

SAVED = "softirq_threads.json"


@dataclass
class Sched:
    """The operations on threads this module needs (a fake in the unit tests)."""

    threads: Callable[[], list[tuple[int, float | None]]]
    get: Callable[[int], tuple[int, int]]
    set: Callable[[int, int, int], None]


def _ksoftirqd() -> list[tuple[int, float | None]]:
    """(pid, start time) of every ``ksoftirqd/N`` thread."""
    from testbed.emu.registry import process_start

    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            comm = (entry / "comm").read_text().strip()
        except OSError:
            continue
        if comm.startswith("ksoftirqd/"):
            found.append((int(entry.name), process_start(int(entry.name))))
    return sorted(found)


def _get(pid: int) -> tuple[int, int]:
    return os.sched_getscheduler(pid), os.sched_getparam(pid).sched_priority


def _set(pid: int, policy: int, priority: int) -> None:
    os.sched_setscheduler(pid, policy, os.sched_param(priority))


SYSTEM = Sched(_ksoftirqd, _get, _set)


def restore_orphaned(state: Path, alive: Callable[[int, float | None], bool], sched: Sched | None = None) -> bool:
    """Put the threads back when the process that raised them died before it could; True when it did."""
    sched = sched or SYSTEM
    doc = saved_by_dead_owner(state / SAVED, alive)
    if doc is None:
        return False
    _put_back(doc.get("threads", []), alive, sched)
    (state / SAVED).unlink(missing_ok=True)
    return True


def _put_back(threads: list[dict], alive: Callable[[int, float | None], bool], sched: Sched) -> None:
    for t in threads:
        if not alive(int(t["pid"]), t.get("start")):
            continue  # gone (a CPU taken offline) or a reused pid: not ours to touch
        try:
            sched.set(int(t["pid"]), int(t["policy"]), int(t["priority"]))
        except OSError:
            pass


@contextmanager
def ahead(state: Path, alive: Callable[[int, float | None], bool], start: float | None, priority: int,
          sched: Sched | None = None) -> Iterator[int]:
    """Within the block every normal-policy ksoftirqd runs SCHED_FIFO at ``priority``; yields how many
    threads this call raised (0: none there, already real-time, no permission, or another owner's).

    Args:
        state: the run registry's state directory (where the old settings are saved).
        alive: ``alive(pid, start)``: is that process still the one recorded.
        start: this process's start time (what ``alive`` compares).
        priority: SCHED_FIFO priority, above the link cores' (1-99).
    """
    sched = sched or SYSTEM
    if not 1 <= priority <= 99:
        raise ValueError(f"priority {priority}: SCHED_FIFO priorities are 1-99")
    restore_orphaned(state, alive, sched)
    saved = state / SAVED
    if saved.exists():
        yield 0  # a live owner raised them (a run beside ours, or an outer block of this process)
        return
    threads = []
    for pid, tstart in sched.threads():
        try:
            policy, prio = sched.get(pid)
        except OSError:
            continue
        if policy in (os.SCHED_FIFO, os.SCHED_RR):
            continue
        threads.append({"pid": pid, "start": tstart, "policy": policy, "priority": prio})
    if not threads:
        yield 0
        return
    try:
        save_owned(saved, {"threads": threads}, os.getpid(), start)
    except OSError:
        yield 0
        return
    raised = []
    try:
        for t in threads:
            try:
                sched.set(t["pid"], os.SCHED_FIFO, priority)
                raised.append(t)
            except OSError:
                pass
        yield len(raised)
    finally:
        _put_back(raised, alive, sched)
        saved.unlink(missing_ok=True)
