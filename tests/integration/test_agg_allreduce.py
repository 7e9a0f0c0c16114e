"""Whole allreduces on a Mininet replica with BMv2 running aggregation.p4: worker processes on the hosts.

    8 workers + PS on one leaf (2 Mbit/s links): int32 exact under 1% loss; two concurrent jobs exact,
    job 2 with part of its window on the parameter server (ATP fallback); float32 within the bound.
    (leaf + spine: test_agg_spine.py; a second replica cannot start while this module's holds the lock)
"""

from __future__ import annotations

import pytest

from testbed.agg.runner import AggTestbed, JobRun

pytestmark = [pytest.mark.root, pytest.mark.mininet, pytest.mark.bmv2]

ELEMS = 64 * 1024          # 256 KB tensors: ~1 s at 2 Mbit/s


@pytest.fixture(scope="module")
def leaf8(tmp_path_factory):
    with AggTestbed(8, "leaf", link_rate_bps=2e6, out_dir=tmp_path_factory.mktemp("agg8"), window=16, jobs=2,
                    ps_slots=4) as tb:
        yield tb


def test_int32_exact_under_one_percent_loss(leaf8):
    r, = leaf8.run_switch([JobRun(1, "int32", ELEMS, loss=0.01)])
    assert r.correct and r.exact and r.max_abs_error == 0
    assert r.injected_drops > 0 and r.retransmits > 0          # loss happened and was recovered
    assert r.switch_stats["complete"] == ELEMS // 256
    assert 0.95 < r.bytes_per_worker_link["down"] / (ELEMS * 4) < 1.5


def test_two_concurrent_jobs_exact_with_ps_fallback(leaf8):
    r1, r2 = leaf8.run_switch([JobRun(1, "int32", ELEMS, seed=2), JobRun(2, "int32", ELEMS, seed=3)])
    assert r1.exact and r2.exact
    assert r1.switch_stats["spill"] > 0                         # job 2's last slots went to the PS
    assert r1.switch_stats["bad_job"] == r1.switch_stats["bad_index"] == 0


def test_float32_within_documented_bound(leaf8):
    r, = leaf8.run_switch([JobRun(1, "float32", ELEMS, seed=4)])
    assert r.correct and not r.exact and r.max_abs_error > 0
