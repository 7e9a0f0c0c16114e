"""The incast fixture's pure helpers (testbed/pfc/fanin.py): the host steal share a trial reports."""

from __future__ import annotations

import pytest

from testbed.pfc.fanin import host_cpu_times, steal_fraction


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
