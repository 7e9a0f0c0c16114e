"""``busbw.png`` of the collective runs (testbed/collective/figure.py), no root: the lines drawn from the rows
(one per collective, algorithm and skew), the allreduce fractions of each replica's own link rate that put
the ring (small, 10 Mbit/s) beside the in-network allreduce (agg-leaf, 4 Mbit/s), the scenario's choice of
what goes in the second panel, and that the file gets that panel."""

from __future__ import annotations

import struct

import pytest

from testbed.collective import figure as F
from testbed.collective import metrics
from testbed.errors import SpecError


def _row(size, seconds, collective="allreduce", algorithm="ring", n=4, scale=10000.0, skew=1.0):
    return metrics.row(collective, n, size, seconds, scale, 0, algorithm=algorithm, skew=skew)


def test_size_labels_are_binary_units():
    assert [F.size_label(s) for s in (65536, 262144, 1 << 20, 4 << 20, 1536, 100, 3 << 30)] == \
        ["64 KiB", "256 KiB", "1 MiB", "4 MiB", "1.5 KiB", "100 B", "3 GiB"]


def test_series_is_one_line_per_collective_algorithm_and_skew_sorted_by_size():
    """The sweep of ring sizes is one line in size order; tree, all-to-all and its skewed run at one size are
    their own points (the old plot drew every row of the job as one line); several jobs are named."""
    rows = [_row(262144, 0.3), _row(65536, 0.1), _row(262144, 0.5, algorithm="tree"),
            _row(262144, 0.4, collective="all_to_all", algorithm=None),
            _row(262144, 0.8, collective="all_to_all", algorithm=None, skew=4.0)]
    lines = F.series([{"name": "sweep", "rows": rows}, {"name": "idle", "rows": []}])
    assert [s["label"] for s in lines] == ["allreduce (ring)", "allreduce (tree)", "all_to_all", "all_to_all skew 4"]
    ring = lines[0]
    assert ring["sizes"] == [65536, 262144]
    assert ring["algbw_bps"] == pytest.approx([65536 * 8 / 0.1, 262144 * 8 / 0.3])
    assert ring["busbw_bps"] == pytest.approx([b * 1.5 for b in ring["algbw_bps"]])
    assert lines[3]["busbw_bps"] == pytest.approx([262144 * 8 / 0.8 * 0.75])
    two = F.series([{"name": "job1", "rows": [_row(65536, 0.1)]}, {"name": "job2", "rows": [_row(65536, 0.2)]}])
    assert [s["label"] for s in two] == ["job1 allreduce (ring)", "job2 allreduce (ring)"]


def test_link_fractions_are_over_each_replicas_own_rate():
    """algbw / link and busbw / link (nccl-tests: x 2(n-1)/n from the row's ranks), only the allreduce rows of
    the algorithm asked for, in size order; the real link the fraction stands for."""
    rows = [_row(1 << 20, 2.0), _row(65536, 0.2), _row(65536, 0.1, algorithm="tree"),
            _row(65536, 0.1, collective="broadcast", algorithm=None)]
    ring = F.link_fractions("ring", rows, 10e6, 10000.0, "ring")
    assert ring["sizes"] == [65536, 1 << 20] and ring["real_link_bps"] == pytest.approx(100e9)
    assert ring["algbw_over_link"] == pytest.approx([65536 * 8 / 0.2 / 10e6, (1 << 20) * 8 / 2.0 / 10e6])
    assert ring["busbw_over_link"] == pytest.approx([f * 1.5 for f in ring["algbw_over_link"]])
    eight = F.link_fractions("innetwork", [_row(65536, 0.15, algorithm="innetwork", n=8, scale=25000.0)], 4e6,
                             25000.0)
    assert eight["algbw_over_link"] == pytest.approx([65536 * 8 / 0.15 / 4e6])
    assert eight["busbw_over_link"] == pytest.approx([65536 * 8 / 0.15 / 4e6 * 1.75])   # 2(n-1)/n at 8 ranks
    assert F.link_fractions("all", rows, 10e6, 1e4)["sizes"] == [65536, 65536, 1 << 20]   # no algorithm: every allreduce
    with pytest.raises(SpecError, match="positive link rate"):
        F.link_fractions("ring", rows, 0.0, 1e4)


def _parts(sizes):
    """Part 1 and part 5 as the scenario keeps them (full-mode sizes: up to 4 MiB), other collectives beside."""
    ring = [_row(s, s * 8 / 6e6) for s in sizes] + [_row(1 << 20, 2.0, algorithm="tree")]
    inn = [_row(s, s * 8 / 3.6e6, algorithm="innetwork", scale=25000.0) for s in sizes]
    return {"sweep": {"fabric": "small", "link_rate_bps": 10e6, "scale": 10000.0,
                      "jobs": [{"name": "sweep", "rows": ring}]},
            "innetwork": {"fabric": "agg-leaf", "link_rate_bps": 4e6, "scale": 25000.0,
                          "jobs": [{"name": "job1", "rows": inn}]}}


def test_the_scenario_compares_ring_and_innetwork_at_every_size_of_the_full_mode():
    from scenarios.collective import comparison

    sizes = [65536, 262144, 1048576, 4194304]
    ring, inn = comparison(_parts(sizes))
    assert ring["sizes"] == inn["sizes"] == sizes                   # the tree row is not the ring's
    assert ring["algbw_over_link"] == pytest.approx([0.6] * 4) and inn["algbw_over_link"] == pytest.approx([0.9] * 4)
    assert "ring" in ring["label"] and "in-network" in inn["label"] and "agg-leaf" in inn["label"]
    assert ring["real_link_bps"] == inn["real_link_bps"] == pytest.approx(100e9)
    parts = _parts(sizes)
    del parts["innetwork"]                                          # --no-innetwork: one panel
    assert comparison(parts) == []


def test_the_scenario_figure_says_the_rates_differ(tmp_path):
    """The figure's title names both replicas' emulated rates; the PNG has the second panel (wider) with part 5
    and not without it."""
    from scenarios.collective import figure
    from testbed.collective import experiment as X

    def width(path):
        return struct.unpack(">I", path.read_bytes()[16:20])[0]     # PNG IHDR

    seen = {}

    class Spy:
        @staticmethod
        def plot(jobs, rate, path, **kw):
            seen.update(kw, rate=rate)
            X.plot(jobs, rate, path, **kw)

    parts = _parts([65536, 262144])
    figure(parts, tmp_path / "both.png", Spy)
    assert seen["rate"] == 10e6 and seen["scale"] == 10000.0 and len(seen["compare"]) == 2
    assert "10 Mbit/s" in seen["title"] and "4 Mbit/s" in seen["title"] and "both 100 Gbit/s real" in seen["title"]
    del parts["innetwork"]
    figure(parts, tmp_path / "ring.png", Spy)
    assert seen["title"] is None and seen["compare"] == []
    assert width(tmp_path / "both.png") > 1.5 * width(tmp_path / "ring.png")
