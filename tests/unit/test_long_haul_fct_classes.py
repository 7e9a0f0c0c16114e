"""The long-haul report's flow-size mix: FCT per size class over valid repetitions, the table and the plot."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from testbed.validate import longhaul_report as report
from testbed.validate.longhaul_setup import row as make_row


def _trial(classes, valid=True):
    """A trial document as the scenario's ``trial`` returns it, with the fields ``row`` reads."""
    t = {"validity": {"valid": valid, "reasons": [] if valid else ["invalid", "no CNP"]}, "health": {"reasons": []},
         "emulator_ok": True, "unaccounted_losses": 0, "emulator": {}, "cpu": {}, "accounting": {},
         "bottleneck": {}, "cnps_rx": 1, "goodput_bps": 1e6, "fct_p50_s": 1.0, "fct_p99_s": 2.0, "queue_peak": 3,
         "queue_mean": 1.0, "feedback_delay_s": 0.5, "drops": 0, "marks": 1, "switch_cnps": 1,
         "retransmissions": 0, "saturation": [],
         "fct_by_size": [{"bytes": b, "messages": 2, "fct_p50_s": p50, "fct_p99_s": p99} for b, p50, p99 in classes]}
    return t


def test_a_row_gives_each_size_class_in_real_milliseconds():
    r = make_row("sender-dci", 30, "ecn", 1000, _trial([(64_000, 0.2, 0.4), (1_000_000, 2.0, 3.0)]))
    assert r["fct_by_size"] == [{"bytes": 64_000, "messages": 2, "fct_p50_ms": 0.2, "fct_p99_ms": 0.4},
                                {"bytes": 1_000_000, "messages": 2, "fct_p50_ms": 2.0, "fct_p99_ms": 3.0}]


def test_size_classes_are_averaged_over_the_valid_repetitions_only(tmp_path):
    rows = [make_row("sender-dci", 30, "ecn", 1000, _trial([(64_000, p, 2 * p), (1_000_000, 10 * p, 20 * p)]), i)
            for i, p in enumerate((0.1, 0.3))]
    rows.append(make_row("sender-dci", 30, "ecn", 1000, _trial([(64_000, 50.0, 50.0)], valid=False), 2))
    g, = report.summarise(rows)
    small, large = g["fct_by_size"]
    assert small["bytes"] == 64_000 and small["fct_p50_ms"]["mean"] == pytest.approx(0.2)   # 0.1 and 0.3 ms
    assert small["fct_p50_ms"]["n"] == 2 and small["fct_p50_ms"]["low"] < 0.2 < small["fct_p50_ms"]["high"]
    assert large["fct_p99_ms"]["mean"] == pytest.approx(4.0)
    out = io.StringIO()
    report.print_fct_classes([g], Console(file=out, width=200))
    text = out.getvalue()
    assert "64 KB p50 / p99" in text and "1 MB p50 / p99" in text and "0.2 [" in text
    assert report.plot_fct_classes([g], tmp_path / "fct.png") and (tmp_path / "fct.png").stat().st_size > 5000


def test_one_size_has_no_class_table_and_no_plot(tmp_path):
    rows = [make_row("sender-dci", 30, "ecn", 1000, _trial([]))]
    groups = report.summarise(rows)
    assert "fct_by_size" not in groups[0]
    out = io.StringIO()
    report.print_fct_classes(groups, Console(file=out))
    assert out.getvalue() == ""
    assert not report.plot_fct_classes(groups, tmp_path / "fct.png") and not (tmp_path / "fct.png").exists()
