"""coordinator.each: the coordinator's per-worker steps run at once, in order, and fail deterministically."""

from __future__ import annotations

import threading

import pytest

from testbed.cluster.coordinator import each


def test_calls_overlap_and_results_keep_their_order():
    n = 4
    together = threading.Barrier(n, timeout=5)   # broken (raises) unless all n calls are in flight at once

    def fn(x):
        together.wait()
        return x * x

    assert each(fn, list(range(n))) == [0, 1, 4, 9]


def test_the_first_failed_item_is_raised_after_all_finished_and_successes_are_kept():
    finished, kept = [], []
    slow_failure = threading.Event()

    def fn(x):
        if x == 1:
            slow_failure.wait(0.3)          # the first failure is also the slowest: still the one raised
            raise ValueError("worker 1")
        if x == 3:
            raise KeyError("worker 3")
        finished.append(x)
        return f"conn{x}"

    with pytest.raises(ValueError, match="worker 1"):
        each(fn, [0, 1, 2, 3], keep=lambda i, r: kept.append((i, r)))
    assert sorted(finished) == [0, 2]
    assert kept == [(0, "conn0"), (2, "conn2")]
