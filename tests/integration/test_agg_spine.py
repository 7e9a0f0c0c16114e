"""Two tiers: 4 workers on two BMv2 leaves under a BMv2 spine that aggregates (leaves route contributions
up and fan results out); the in-network allreduce and the ring are both exact, and the switch moves fewer
bytes per worker link than the ring."""

from __future__ import annotations

import pytest

from testbed.agg.runner import AggTestbed, JobRun

pytestmark = [pytest.mark.root, pytest.mark.mininet, pytest.mark.bmv2]


def test_leaf_spine_switch_and_ring_exact(tmp_path):
    with AggTestbed(4, "leaf-spine", link_rate_bps=4e6, out_dir=tmp_path, window=16, jobs=1) as tb:
        sw, = tb.run_switch([JobRun(1, "int32", 32 * 1024)])
        ring = tb.run_ring(JobRun(1, "int32", 32 * 1024))
    assert sw.exact and ring.exact and sw.wrong == ring.wrong == 0      # every worker's result, element by element
    assert sw.switch_stats["complete"] == 32 * 1024 // 256
    assert sw.bytes_per_worker_link["up"] < ring.bytes_per_worker_link["up"]
