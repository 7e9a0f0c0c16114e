"""The machine's CPU accounting (testbed/emu/cpustat.py): steal and busy shares, and the keep-awake
spinners found from any process and left out of busy."""

from __future__ import annotations

import os
import subprocess

import pytest

from testbed.emu.awake import KeepAwake
from testbed.emu.cpustat import (
    busy_fraction,
    host_cpu_times,
    load_average,
    process_ticks,
    sample,
    spinner_load,
    spinner_pids,
    steal_fraction,
)
from testbed.poll import poll


def test_steal_is_the_eighth_field_share_of_all_ticks():
    # user nice system idle iowait irq softirq steal
    before = [100, 0, 50, 800, 0, 0, 10, 40]
    after = [130, 0, 70, 950, 0, 0, 20, 70]      # +30 +20 +150 +10 +30 steal = 240 ticks
    assert steal_fraction(before, after) == pytest.approx(30 / 240)
    assert steal_fraction(after, after) == 0.0   # no time passed: no share, no division by zero


def test_host_cpu_times_reads_eight_counters_that_only_grow():
    a = host_cpu_times()
    b = host_cpu_times()
    assert len(a) == 8 and all(y >= x for x, y in zip(a, b, strict=True))
    assert 0.0 <= steal_fraction(a, b) <= 1.0


def test_busy_counts_steal_not_idle_or_iowait_and_leaves_excluded_ticks_out():
    before = [100, 0, 50, 800, 0, 0, 10, 40]
    after = [130, 0, 70, 950, 10, 0, 20, 70]     # 250 ticks: 150 idle + 10 iowait, 90 busy (30 of it steal)
    assert busy_fraction(before, after) == pytest.approx(90 / 250)
    assert busy_fraction(before, after, excluded_ticks=40) == pytest.approx(50 / 250)
    assert busy_fraction(before, after, excluded_ticks=1000) == 0.0   # never below zero
    assert busy_fraction(after, after) == 0.0


class Run:
    def spawn(self, argv, **kw):
        return subprocess.Popen(argv, start_new_session=True, **kw)


def test_spinners_are_found_by_their_mark_and_their_cpu_is_not_busy():
    assert not (set(spinner_pids()) & {os.getpid()})
    with KeepAwake(Run()) as awake:
        poll(lambda: set(awake.pids) <= set(spinner_pids()), timeout=10, what="spinners found by their mark")
        poll(lambda: all(os.sched_getscheduler(p) == os.SCHED_IDLE for p in awake.pids), timeout=10,
             what="spinners in SCHED_IDLE")
        windows = []
        for _ in range(5):   # SCHED_IDLE spins only on an idle CPU: a window where other work filled both
            t0, c0 = process_ticks(awake.pids), host_cpu_times()    # CPUs (a CI beside other runs) shows
            s = sample(1.0)                                         # nothing, so take the first that spun
            spun, raw = process_ticks(awake.pids) - t0, busy_fraction(c0, host_cpu_times())
            windows.append((spun, round(raw, 2), round(s["busy"], 2)))
            if spun > 10:                   # they did spin (100 ticks/s per idle CPU)...
                break
        assert spun > 10, f"the spinners never spun in 5 one-second windows (spun, raw, busy): {windows}"
        # ...and sample() found them and left their CPU out: at least half of what they measurably took
        # (other work beside the test, e.g. a VM, keeps raw near 1 and leaves the spinners only a share)
        share = spun / (os.sysconf("SC_CLK_TCK") * os.cpu_count())
        assert s["busy"] < raw - 0.5 * share, (windows, round(share, 3))
        pids = awake.pids
    poll(lambda: not set(pids) & set(spinner_pids()), timeout=10, what="spinners gone")
    assert process_ticks([2 ** 22 + 7]) == 0   # no such process: nothing, no error


def test_a_spinner_weighs_in_the_load_averages_by_how_long_it_has_run():
    assert spinner_load([]) == (0.0, 0.0, 0.0)
    assert spinner_load([0.0]) == (0.0, 0.0, 0.0)
    one_minute = spinner_load([60.0])
    assert one_minute == pytest.approx((1 - 1 / 2.718281828, 1 - 2.718281828 ** -0.2, 1 - 2.718281828 ** (-1 / 15)))
    assert spinner_load([1e6, 1e6]) == pytest.approx((2.0, 2.0, 2.0))


def _fake_proc(root, uptime_s, spinners_started_s, others=()):
    """A /proc with ``uptime`` and one folder per process: spinners carry the mark in their command line."""
    tick = os.sysconf("SC_CLK_TCK")
    (root / "uptime").write_text(f"{uptime_s:.2f} 0.00\n")
    for pid, (started, marked) in enumerate([(s, True) for s in spinners_started_s]
                                            + [(s, False) for s in others], start=100):
        d = root / str(pid)
        d.mkdir()
        (d / "cmdline").write_bytes(b"python3\0-c\0" + (b"testbed-keep-awake" if marked else b"x"))
        fields = ["S"] + ["0"] * 18 + [str(int(started * tick))] + ["0"] * 30
        (d / "stat").write_text(f"{pid} (python3) " + " ".join(fields) + "\n")
    return root


def test_load_average_leaves_out_young_spinners_by_their_age_not_whole(tmp_path):
    # two spinners started 10 s ago, one unrelated process: raw 2.5 one-minute load is mostly real work
    proc = _fake_proc(tmp_path, 1000.0, [990.0, 990.0], others=[10.0])
    one, five, fifteen = load_average(proc=proc, raw=(2.5, 1.0, 0.5))
    assert one == pytest.approx(2.5 - 2 * (1 - 2.718281828 ** (-10 / 60)), abs=0.01)   # ~2.19, not 0.5
    assert five == pytest.approx(1.0 - 2 * (1 - 2.718281828 ** (-10 / 300)), abs=0.01)
    assert 0.0 < fifteen < 0.5
    # spinners running for an hour count whole; never below zero
    (tmp_path / "old").mkdir()
    old = _fake_proc(tmp_path / "old", 5000.0, [1000.0, 1000.0])
    assert load_average(proc=old, raw=(2.5, 2.1, 1.0)) == pytest.approx((0.5, 0.1, 0.0), abs=0.02)
