"""A long-haul trial over time: the queue from cumulative registers, real-world time, the plot."""

import pytest

from testbed.p4rt.fabric_stats import queue_series
from testbed.validate import longhaul_report as report
from testbed.validate import longhaul_setup as S


def test_queue_series_is_the_mean_depth_per_interval():
    # 3 packets at depths 10, 20, 30 between the first two readings; none in the next interval
    samples = [(100.0, 5, 1), (100.025, 65, 4), (100.05, 65, 4), (100.075, 165, 8)]
    assert queue_series(samples) == [(100.025, 20.0), (100.05, None), (100.075, 25.0)]
    assert queue_series(samples[:1]) == []


def _sender(started_at, rows):
    return {"started_at": started_at, "series": {"columns": ["t", "rate_bps", "target_bps"], "rows": rows}}


def test_timeline_in_real_world_units_from_the_first_start():
    scale = 1000.0
    results = [_sender(50.0, [[0.0, 10e6, 10e6], [0.5, 5e6, 10e6]]), _sender(50.2, [[0.0, 10e6, 10e6]])]
    tl = S.timeline(("h0", "h1"), results, [(50.1, 3.0), (50.3, None)], {"h0": [50.4, 51.0], "h1": []}, scale)
    # 0.5 s emulated after the first start = 0.5 ms real; 10 Mbit/s emulated = 10 Gbit/s real
    assert tl["rate"]["h0"] == {"t_ms": [0.0, 0.5], "rate_gbps": [10.0, 5.0]}
    assert tl["rate"]["h1"]["t_ms"] == [pytest.approx(0.2)]
    assert tl["queue"] == {"t_ms": [pytest.approx(0.1), pytest.approx(0.3)], "pkts": [3.0, None]}
    assert tl["cnps"] == {"h0": [pytest.approx(0.4), pytest.approx(1.0)], "h1": []}


def test_timeline_of_a_sender_without_series_is_empty_not_an_error():
    tl = S.timeline(("h0",), [{"started_at": 1.0}], [], {"h0": []}, 1000.0)
    assert tl["rate"]["h0"] == {"t_ms": [], "rate_gbps": []}


def test_plot_timeline_draws_both_modes(tmp_path):
    results = [_sender(1.0, [[i * 0.02, 10e6 / (1 + i), 10e6] for i in range(20)])]
    tl = S.timeline(("h0",), results, [(1.0 + i * 0.02, float(i)) for i in range(20)], {"h0": [1.1, 1.2]}, 1000.0)
    path = tmp_path / "timeline.png"
    report.plot_timeline({("sender-dci", "ecn"): tl, ("sender-dci", "fast-cnp"): tl}, path, "30 km")
    assert path.stat().st_size > 10_000
    report.plot_timeline({}, tmp_path / "none.png", "nothing")   # nothing ran: no figure, no error
    assert not (tmp_path / "none.png").exists()
